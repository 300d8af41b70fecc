package stack

import (
	"testing"
	"time"
)

// StartAPIWithoutPayment starts a second API process on the stack's
// database, with the stack's flags and secrets but without a Stripe key,
// so payment is disabled there whatever Options.Stripe says, and returns
// its base URL (http://host:port) once it listens. Its accounts are the
// stack's: a test sees both payment modes from one stack.
func (s *Stack) StartAPIWithoutPayment(t testing.TB) (string, *Proc) {
	t.Helper()
	addr := FreeAddr(t)
	args := append([]string{"-listen", addr, "-metrics-listen", FreeAddr(t)}, s.apiArgs...)
	p := Start(t, "api (no payment)", s.apiBin, args, s.apiEnv)
	WaitListening(t, p, addr, 30*time.Second)
	return "http://" + addr, p
}
