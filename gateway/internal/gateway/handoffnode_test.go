package gateway

import (
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"berth.dev/broker/handoff"
	"berth.dev/broker/proxyproto"
)

// hoNode is the node's side of the socket handoff for these tests,
// built on the protocol package the real node uses (berth.dev/broker/handoff;
// the real node is broker/internal/node/handoff.go, which this module
// cannot import): it greets each gateway connection with its hello (the
// devices still served that no connected gateway answers for), verifies
// each handoff's PROXY header with proxyproto's Verifier, answers
// the refusal set for a tenant (setRefuse), else taken, serves the device
// on the received socket as testNode's loopback broker (the node's
// conns channel sees it), and reports closed when it ends. A close frame
// closes the device's socket. A hello that lists devices is followed by
// their credentials frame, as the real node's.
type hoNode struct {
	id   string
	path string
	tcp  *testNode // verifier, loopback broker, conns
	ln   *handoff.Listener
	seen chan handoffSeen
	wg   sync.WaitGroup

	mu      sync.Mutex
	refuse  map[string]refusePlan         // tenants whose handoffs are refused
	gws     map[*handoff.Conn]*sync.Mutex // connected gateways and their write locks
	devices map[uint64]*handedDevice
}

type handedDevice struct {
	conn  net.Conn
	owner *handoff.Conn // the gateway connection told of its end
	tid   string
	cred  string
}

// handoffSeen is one handoff received and what the node answered.
type handoffSeen struct {
	id     uint64
	info   proxyproto.Info
	taken  bool
	reason handoff.Reason
}

func newHoNode(t *testing.T, dir, id string, tcp *testNode) *hoNode {
	t.Helper()
	path := filepath.Join(dir, id+".sock")
	ln, err := handoff.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	n := &hoNode{id: id, path: path, tcp: tcp, ln: ln, seen: make(chan handoffSeen, 16),
		refuse: map[string]refusePlan{}, gws: map[*handoff.Conn]*sync.Mutex{}, devices: map[uint64]*handedDevice{}}
	n.wg.Go(n.accept)
	t.Cleanup(n.stop)
	return n
}

// stop ends the node: its listener, gateway connections and devices.
func (n *hoNode) stop() {
	n.ln.Close()
	n.mu.Lock()
	for c := range n.gws {
		c.Close()
	}
	for _, d := range n.devices {
		d.conn.Close()
	}
	n.mu.Unlock()
	n.wg.Wait()
}

// refusePlan is a refusal: its reason, and what to do before it is sent.
type refusePlan struct {
	reason handoff.Reason
	first  func() // nil: nothing
}

// setRefuse makes the node refuse tenant's handoffs with r, after running
// first (if not nil).
func (n *hoNode) setRefuse(tenant string, r handoff.Reason, first func()) {
	n.mu.Lock()
	n.refuse[tenant] = refusePlan{r, first}
	n.mu.Unlock()
}

// gateways is how many gateway connections the node has.
func (n *hoNode) gateways() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.gws)
}

// next returns the next handoff the node received.
func (n *hoNode) next(t *testing.T) handoffSeen {
	t.Helper()
	select {
	case s := <-n.seen:
		return s
	case <-time.After(5 * time.Second):
		t.Fatal("the node received no handoff within 5 s")
		return handoffSeen{}
	}
}

func (n *hoNode) accept() {
	for {
		c, err := n.ln.Accept()
		if err != nil {
			return
		}
		wmu := &sync.Mutex{}
		n.mu.Lock()
		n.gws[c] = wmu
		var live []handoff.Live
		for id, d := range n.devices {
			if _, ok := n.gws[d.owner]; !ok {
				d.owner = c
				live = append(live, handoff.Live{ID: id, Tenant: d.tid, Credential: d.cred})
			}
		}
		hello, _ := handoff.AppendHellos(nil, n.id, live)
		hello, _ = handoff.AppendCredentials(hello, live)
		n.mu.Unlock()
		n.send(c, hello)
		n.wg.Go(func() { n.read(c) })
	}
}

func (n *hoNode) send(c *handoff.Conn, frame []byte) {
	n.mu.Lock()
	wmu := n.gws[c]
	n.mu.Unlock()
	if wmu == nil {
		return
	}
	wmu.Lock()
	defer wmu.Unlock()
	c.Write(frame)
}

func (n *hoNode) read(c *handoff.Conn) {
	defer func() {
		c.Close()
		n.mu.Lock()
		delete(n.gws, c)
		n.mu.Unlock()
	}()
	for {
		f, err := c.ReadFrame(5 * time.Second)
		if err != nil {
			return
		}
		switch f.Type {
		case handoff.TypeHandoff:
			id, hdr, err := handoff.ParseHandoff(f.Body)
			if err != nil || len(f.FDs) != 1 {
				f.CloseFDs()
				return
			}
			n.receive(c, id, append([]byte(nil), hdr...), f.FDs[0])
		case handoff.TypeClose:
			id, _ := handoff.ParseID(f.Body)
			n.mu.Lock()
			d := n.devices[id]
			n.mu.Unlock()
			if d != nil {
				d.conn.Close()
			}
		}
	}
}

// receive answers one handoff and serves a device it takes.
func (n *hoNode) receive(c *handoff.Conn, id uint64, hdr []byte, fd int) {
	f := os.NewFile(uintptr(fd), "device")
	dev, err := net.FileConn(f)
	f.Close()
	if err != nil {
		n.send(c, handoff.AppendRefused(nil, id, handoff.RefusedBadDescriptor))
		return
	}
	var nc nodeConn
	err = n.tcp.verifier.Verify(hdr, &nc.header, &nc.info)
	s := handoffSeen{id: id, info: nc.info}
	n.mu.Lock()
	plan, refused := n.refuse[nc.info.TenantID]
	switch {
	case err != nil:
		s.reason = handoff.RefusedBadHeader
	case refused:
		s.reason = plan.reason
	default:
		s.taken = true
		n.devices[id] = &handedDevice{conn: dev, owner: c, tid: nc.info.TenantID, cred: nc.info.CredentialID}
	}
	n.mu.Unlock()
	n.seen <- s
	if refused && plan.first != nil {
		plan.first()
	}
	if !s.taken {
		dev.Close() // nothing written to it: the gateway still holds the device
		n.send(c, handoff.AppendRefused(nil, id, s.reason))
		return
	}
	n.send(c, handoff.AppendID(nil, handoff.TypeTaken, id))
	n.wg.Go(func() {
		n.tcp.serveMQTT(dev, nc)
		dev.Close()
		n.mu.Lock()
		d := n.devices[id]
		delete(n.devices, id)
		n.mu.Unlock()
		n.send(d.owner, handoff.AppendID(nil, handoff.TypeClosed, id))
	})
}
