package wal

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const crashDirEnv = "BERTH_WAL_CRASH_CHILD_DIR"

// crashPayload is what appender w writes as its i-th record.
func crashPayload(w, i int) string {
	return fmt.Sprintf("writer %d record %d %s", w, i, strings.Repeat("z", (w*7+i)%300))
}

// crashChild is the child of TestCrashLoop (TestMain runs it when
// crashDirEnv is set): it appends with SyncAlways from several goroutines and
// prints "offset writer index" for every record once it is durable, until it
// is killed.
func crashChild(dir string) {
	l, err := Open(Options{Dir: dir, Fsync: SyncAlways, SegmentBytes: 64 << 10})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(2)
	}
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				off, err := l.AppendSync([]byte(fmt.Sprint(w)), []byte(crashPayload(w, i)), 1)
				if err != nil {
					fmt.Println("append:", err)
					os.Exit(3)
				}
				mu.Lock()
				fmt.Fprintf(out, "%d %d %d\n", off, w, i)
				out.Flush()
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

// TestCrashLoop kills an appending child with SIGKILL at a random moment,
// ten times on the same log; after each crash every offset the child
// reported durable must be readable with its content.
func TestCrashLoop(t *testing.T) {
	dir := t.TempDir()
	total := 0
	for iter := range 10 {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), crashDirEnv+"="+dir)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 1024)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		// Wait for some durable records, then kill at a random moment.
		killAfter := 20 + rand.IntN(400)
		deadline := time.After(20 * time.Second)
		var reported []string
	collect:
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					break collect
				}
				reported = append(reported, line)
				if len(reported) == killAfter {
					_ = cmd.Process.Signal(syscall.SIGKILL)
				}
			case <-deadline:
				_ = cmd.Process.Signal(syscall.SIGKILL)
				t.Fatalf("iteration %d: child made no progress; output so far: %q", iter, reported)
			}
		}
		_ = cmd.Wait()
		if len(reported) < killAfter {
			t.Fatalf("iteration %d: child exited early: %q", iter, reported)
		}

		l, err := Open(Options{Dir: dir, SegmentBytes: 64 << 10, Logger: testLogger(t)})
		if err != nil {
			t.Fatalf("iteration %d: reopen after SIGKILL: %v", iter, err)
		}
		for _, line := range reported {
			f := strings.Fields(line)
			if len(f) != 3 {
				t.Fatalf("iteration %d: bad child line %q", iter, line)
			}
			off, _ := strconv.ParseUint(f[0], 10, 64)
			w, _ := strconv.Atoi(f[1])
			i, _ := strconv.Atoi(f[2])
			r, err := l.ReadFrom(off)
			if err != nil {
				t.Fatalf("iteration %d: ReadFrom(%d): %v", iter, off, err)
			}
			rec, err := r.Next()
			r.Close()
			if err != nil || rec.Offset != off || string(rec.Payload) != crashPayload(w, i) {
				t.Fatalf("iteration %d: durable offset %d lost or wrong: %v, got offset %d payload %q", iter, off, err, rec.Offset, rec.Payload)
			}
		}
		if err := l.Verify(); err != nil {
			t.Fatalf("iteration %d: %v", iter, err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		total += len(reported)
	}
	t.Logf("10 crashes, %d durable records checked", total)
}
