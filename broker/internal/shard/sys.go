package shard

import (
	"strconv"
	"time"
)

// sysLoop publishes the $SYS/broker/... statistics, retained, every
// SysInterval until Shutdown. '#' does not match them [MQTT-4.7.2-1].
func (s *Shard) sysLoop() {
	s.publishSys()
	s.every(s.opts.SysInterval, s.publishSys)
}

// every calls fn every interval until Shutdown; it runs as one of the
// shard's background goroutines (bgwg).
func (s *Shard) every(interval time.Duration, fn func()) {
	defer s.bgwg.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			fn()
		case <-s.stopBg:
			return
		}
	}
}

// publishSys publishes one round of $SYS topics.
func (s *Shard) publishSys() {
	st := s.Stats()
	now := time.Now()
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	i := func(v int64) string { return strconv.FormatInt(v, 10) }
	topics := [...]struct{ name, value string }{
		{"$SYS/broker/uptime", i(int64(st.Uptime / time.Second))},
		{"$SYS/broker/clients/connected", i(st.ClientsConnected)},
		{"$SYS/broker/clients/total", i(st.ConnectionsTotal)},
		{"$SYS/broker/sessions/count", i(int64(st.Sessions))},
		{"$SYS/broker/subscriptions/count", i(int64(st.Subscriptions))},
		{"$SYS/broker/retained messages/count", i(int64(st.Retained))},
		{"$SYS/broker/messages/received", u(st.MessagesIn)},
		{"$SYS/broker/messages/sent", u(st.MessagesOut)},
		{"$SYS/broker/bytes/received", u(st.BytesIn)},
		{"$SYS/broker/bytes/sent", u(st.BytesOut)},
		{"$SYS/broker/messages/dropped", u(s.stats.totalDropped())},
	}
	for _, t := range topics {
		s.publishInternal(newSimpleMessage(t.name, []byte(t.value), 0, true, now))
	}
	for r := DropReason(0); r < numDropReasons; r++ {
		s.publishInternal(newSimpleMessage("$SYS/broker/messages/dropped/"+r.String(),
			[]byte(u(s.stats.drops[r].Load())), 0, true, now))
	}
}
