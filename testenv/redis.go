package testenv

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultRedisURL is the dev stack's Redis.
const DefaultRedisURL = "redis://127.0.0.1:63790/0"

// RedisSpace is a test's own part of the shared Redis: every key the code
// under test writes must start with Prefix.
type RedisSpace struct {
	Client *redis.Client
	URL    string
	Prefix string
}

// Redis returns a client and a fresh key prefix. When the test ends, every
// key under the prefix is deleted and the client closed.
func Redis(t testing.TB) RedisSpace {
	t.Helper()
	u := os.Getenv("BERTH_TEST_REDIS_URL")
	if u == "" {
		u = DefaultRedisURL
	}
	opt, err := redis.ParseURL(u)
	if err != nil {
		t.Fatalf("testenv: BERTH_TEST_REDIS_URL: %v", err)
	}
	c := redis.NewClient(opt)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		t.Fatalf("testenv: Redis at %s is unreachable (%v); run `make test`, or `make dev-up` before `go test`", u, err)
	}
	prefix := "test:" + randomHex(6) + ":"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		iter := c.Scan(ctx, 0, prefix+"*", 500).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
		c.Close()
	})
	return RedisSpace{Client: c, URL: u, Prefix: prefix}
}
