package replica

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ack is one acknowledged proposal.
type ack struct {
	data string
	node uint64
	at   time.Time
}

// procLoad is the writers: per group, writers that propose unique values
// one at a time to the group's leader, re-finding it after any error.
type procLoad struct {
	c     *procCluster
	stop  chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	acked map[int][]ack // by group, in acknowledgement order
	maybe map[string]bool
	count atomic.Int64
}

func startLoad(c *procCluster, groups, writers int) *procLoad {
	l := &procLoad{c: c, stop: make(chan struct{}), acked: map[int][]ack{}, maybe: map[string]bool{}}
	for g := 1; g <= groups; g++ {
		for w := range writers {
			l.wg.Go(func() { l.write(g, w) })
		}
	}
	return l
}

func (l *procLoad) write(g, w int) {
	conns := map[uint64]*bufio.ReadWriter{}
	raw := map[uint64]net.Conn{}
	defer func() {
		for _, c := range raw {
			c.Close()
		}
	}()
	var lead uint64
	for seq := 0; ; {
		select {
		case <-l.stop:
			return
		default:
		}
		if lead == 0 {
			if lead, _ = l.c.leader(g); lead == 0 {
				time.Sleep(10 * time.Millisecond) // election under way: ask again shortly
				continue
			}
		}
		rw := conns[lead]
		if rw == nil {
			addr := l.c.ctl(lead)
			conn, err := net.DialTimeout("tcp", addr, time.Second)
			if addr == "" || err != nil {
				lead = 0
				continue
			}
			raw[lead], rw = conn, bufio.NewReadWriter(bufio.NewReader(conn), bufio.NewWriter(conn))
			conns[lead] = rw
		}
		data := fmt.Sprintf("g%d.w%d.%d", g, w, seq)
		seq++ // never reused: a value is proposed once
		fmt.Fprintf(rw, "p %d %s\n", g, data)
		err := rw.Flush()
		var line string
		if err == nil {
			line, err = rw.ReadString('\n')
		}
		switch line = strings.TrimSpace(line); {
		case err == nil && line == "ok":
			l.mu.Lock()
			l.acked[g] = append(l.acked[g], ack{data, lead, time.Now()})
			l.mu.Unlock()
			l.count.Add(1)
			continue
		case err == nil && line == "notleader":
		default: // the node died, or the proposal timed out: it may still commit
			l.mu.Lock()
			l.maybe[data] = true
			l.mu.Unlock()
			if err != nil {
				raw[lead].Close()
				delete(raw, lead)
				delete(conns, lead)
			}
		}
		lead = 0
	}
}

func (l *procLoad) halt() {
	close(l.stop)
	l.wg.Wait()
}

// firstAck is the first acknowledgement for group g after t by a node other than not.
func (l *procLoad) firstAck(g int, after time.Time, not uint64) (ack, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, a := range l.acked[g] {
		if a.at.After(after) && a.node != not {
			return a, true
		}
	}
	return ack{}, false
}

func (l *procLoad) ackedBefore(g int, t time.Time) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, a := range l.acked[g] {
		if a.at.Before(t) {
			out = append(out, a.data)
		}
	}
	return out
}
