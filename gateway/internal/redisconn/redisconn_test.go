package redisconn

import (
	"flag"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     Config
		mode    string
		wantErr string // substring; "" means valid
	}{
		{"url", Config{URL: "redis://127.0.0.1:6379/2"}, ModeURL, ""},
		{"rediss url", Config{URL: "rediss://u:p@redis.example:6380/0"}, ModeURL, ""},
		{"sentinel", Config{SentinelMaster: "berth", Addrs: "s1:26379, s2:26379,s3:26379"}, ModeSentinel, ""},
		{"cluster", Config{Cluster: true, Addrs: "n1:6379"}, ModeCluster, ""},
		{"nothing", Config{}, "", "is required"},
		{"bad url", Config{URL: "http://x"}, ModeURL, "-redis-url"},
		{"addrs without a mode", Config{URL: "redis://x:6379", Addrs: "n1:6379"}, ModeURL, "needs -redis-sentinel-master or -redis-cluster"},
		{"url and sentinel", Config{URL: "redis://x:6379", SentinelMaster: "m", Addrs: "s:26379"}, ModeSentinel, "not both"},
		{"sentinel and cluster", Config{SentinelMaster: "m", Cluster: true, Addrs: "s:26379"}, ModeSentinel, "exclude each other"},
		{"sentinel without addrs", Config{SentinelMaster: "m"}, ModeSentinel, "needs -redis-addrs"},
		{"cluster without addrs", Config{Cluster: true, Addrs: " , "}, ModeCluster, "needs -redis-addrs"},
		{"addr without port", Config{Cluster: true, Addrs: "n1"}, ModeCluster, "not host:port"},
		{"cluster db", Config{Cluster: true, Addrs: "n1:6379", DB: 1}, ModeCluster, "only database 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if m := tc.cfg.Mode(); m != tc.mode {
				t.Errorf("Mode = %q, want %q", m, tc.mode)
			}
			err := tc.cfg.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Validate = %v, want nil", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Validate = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestBadURLHidesPassword: a -redis-url go-redis refuses is reported
// without the URL (its parse errors quote it, password and all).
func TestBadURLHidesPassword(t *testing.T) {
	for _, u := range []string{"redis://:pa%zzs3cret@127.0.0.1:6379/0", "redis://u:s3cret@127.0.0.1:6379/notadb",
		"http://u:s3cret@127.0.0.1:6379"} {
		c := Config{URL: u}
		errV := c.Validate()
		_, errO := c.Options()
		for _, err := range []error{errV, errO} {
			if err == nil || !strings.Contains(err.Error(), "-redis-url") || strings.Contains(err.Error(), "s3cret") {
				t.Errorf("%q: %v, want -redis-url named and no password", u, err)
			}
		}
	}
}

// TestClients: each mode yields the go-redis client type that speaks it.
func TestClients(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want func(redis.UniversalClient) bool
	}{
		{"url", Config{URL: "redis://127.0.0.1:1/0"}, func(c redis.UniversalClient) bool { _, ok := c.(*redis.Client); return ok }},
		{"sentinel", Config{SentinelMaster: "m", Addrs: "127.0.0.1:1"}, func(c redis.UniversalClient) bool { _, ok := c.(*redis.Client); return ok }},
		{"cluster with one seed", Config{Cluster: true, Addrs: "127.0.0.1:1"}, func(c redis.UniversalClient) bool { _, ok := c.(*redis.ClusterClient); return ok }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := tc.cfg.NewClient()
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if !tc.want(c) {
				t.Fatalf("NewClient = %T", c)
			}
		})
	}
	o, err := (&Config{SentinelMaster: "m", Addrs: "a:1,b:2", Password: "pw", SentinelPass: "spw", TLS: true, DB: 3}).Options()
	if err != nil {
		t.Fatal(err)
	}
	if o.MasterName != "m" || len(o.Addrs) != 2 || o.Password != "pw" || o.SentinelPassword != "spw" || o.TLSConfig == nil || o.DB != 3 {
		t.Fatalf("sentinel options = %+v", o)
	}
	o, err = (&Config{URL: "rediss://u:pw@h:6380/4"}).Options()
	if err != nil {
		t.Fatal(err)
	}
	if o.Addrs[0] != "h:6380" || o.Username != "u" || o.Password != "pw" || o.DB != 4 || o.TLSConfig == nil {
		t.Fatalf("url options = %+v", o)
	}
}

func TestFlags(t *testing.T) {
	var c Config
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	c.RegisterFlags(fs)
	if err := fs.Parse([]string{"-redis-cluster", "-redis-addrs", "n1:6379,n2:6379", "-redis-password", "pw"}); err != nil {
		t.Fatal(err)
	}
	if c.Mode() != ModeCluster || c.Addrs != "n1:6379,n2:6379" || c.Password != "pw" {
		t.Fatalf("parsed %+v", c)
	}
}
