package wal_test

import (
	"errors"
	"fmt"
	"io"
	"log"
	"os"

	"berth.dev/broker/internal/wal"
)

func Example() {
	dir, err := os.MkdirTemp("", "wal-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	l, err := wal.Open(wal.Options{Dir: dir, Fsync: wal.SyncAlways})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	// Acknowledge a QoS 1 PUBLISH only after AppendSync returns nil.
	for _, msg := range []string{"21.5", "21.7"} {
		if _, err := l.AppendSync([]byte("sensors/t1"), []byte(msg), 1); err != nil {
			log.Fatal(err) // never acknowledge
		}
	}

	// An offline session's cursor replays from its offset.
	r, err := l.ReadFrom(0)
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			log.Fatal(err) // a *wal.CorruptionError is never skipped
		}
		fmt.Printf("%d %s %s\n", rec.Offset, rec.Key, rec.Payload)
	}
	// Output:
	// 0 sensors/t1 21.5
	// 1 sensors/t1 21.7
}
