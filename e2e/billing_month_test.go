package e2e

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/billing/invoice"
	"berth.dev/e2e/internal/stack"
)

// A month of billing walked through the real stack (api with payment
// through stripe-mock, node, gateway, billing worker processes):
//
//   - an account without a payment method is refused a paid plan (402);
//     one that set a card up (SetupIntent at stripe-mock, then Stripe's
//     webhook signed with the endpoint's secret) gets a tenant on pro;
//   - real MQTT clients (paho 5, paho 3.1.1, mosquitto_pub) and an HTTP
//     publish send messages through the gateway, the test counting every
//     one the node accepted and every one it refused (a topic outside the
//     credential's ACL: MQTT 5 PUBACK 0x87; 3.1.1 acknowledged all the
//     same), which the usage rows count as read (messages_in) and never as
//     accepted (messages_accepted, what is billed);
//   - a budget of one cent with action "cap": the billing worker's first
//     run finds the draft over it and caps the tenant's quotas to the free
//     plan's bounds live, so a 300 KiB publish that pro took a moment
//     before is refused on the same connection (DISCONNECT 0x95);
//   - the node stops (its last usage flushed), and a billing worker whose
//     clock is set past the month's end and grace (-now) issues the
//     month's invoice and pushes it to stripe-mock: its lines are the
//     node's minute usage × the plan's prices, computed here apart from
//     the worker, with exactly the messages the node accepted (none of
//     those it refused); the PDF of it reads back with pdftotext.
func TestBillingMonthThroughRealTraffic(t *testing.T) {
	t.Parallel()
	began := time.Now()
	s := stack.New(t, bins, stack.Options{Stripe: true, UsageInterval: time.Second})
	ctx := t.Context()
	db, err := pgxpool.New(ctx, s.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)

	// Entitlement: no payment method, no paid plan.
	payer, unpaid := s.Signup(t), s.Signup(t)
	for _, a := range []stack.Account{payer, unpaid} {
		wantPaymentRequired(t, call(t, s, "POST", "/v1/tenants", a.APIKey, "", map[string]string{"slug": "m-" + strings.ToLower(a.ID[4:10]), "plan": "pro"}))
	}
	wantPaymentRequired(t, call(t, s, "PATCH", "/v1/tenants/"+unpaid.Tenant.ID, unpaid.APIKey, "", map[string]string{"plan": "pro"}))

	// The payer sets up a card: a SetupIntent for its Stripe customer
	// (made at stripe-mock the first time), then Stripe's signed event.
	var si struct {
		ClientSecret string `json:"client_secret"`
	}
	if code := s.Do(t, "POST", "/v1/billing/setup-intent", payer.APIKey, nil, &si); code != http.StatusOK || !strings.Contains(si.ClientSecret, "_secret_") {
		t.Fatalf("setup intent: status %d, client secret %q", code, si.ClientSecret)
	}
	var customer string
	if err := db.QueryRow(ctx, `SELECT stripe_customer_id FROM accounts WHERE id = $1`, payer.ID).Scan(&customer); err != nil {
		t.Fatal(err)
	}
	if got := postStripeEvent(t, s, "whsec_not_the_endpoints", "setup_intent.succeeded", customer); got != http.StatusBadRequest {
		t.Fatalf("webhook signed with another secret: status %d, want 400", got)
	}
	if got := postStripeEvent(t, s, s.StripeWebhookSecret, "setup_intent.succeeded", customer); got != http.StatusOK {
		t.Fatalf("webhook: status %d", got)
	}
	var metered struct {
		ID        string    `json:"id"`
		CreatedAt time.Time `json:"created_at"`
	}
	if code := s.Do(t, "POST", "/v1/tenants", payer.APIKey, map[string]string{"slug": "metered-" + strings.ToLower(payer.ID[4:10]), "plan": "pro"}, &metered); code != http.StatusCreated {
		t.Fatalf("pro tenant with a payment method: status %d", code)
	}
	wantPaymentRequired(t, call(t, s, "PATCH", "/v1/tenants/"+unpaid.Tenant.ID, unpaid.APIKey, "", map[string]string{"plan": "pro"}))

	// Traffic, every accepted message counted.
	acct := payer
	acct.Tenant.ID = metered.ID
	cred := s.CreateCredential(t, acct, []string{"metered/#", "big/#"}, []string{"metered/#"}, nil)
	gw := s.Gateways[0].MQTT
	sub := mustConnectV5(t, gw, cred, "meter-sub")
	sub.subscribe(t, "metered/#")
	pub5 := mustConnectV5(t, gw, cred, "meter-pub5")
	pub3, rc := connectV3(t, gw, cred, "meter-pub3")
	if rc != 0 {
		t.Fatalf("3.1.1 connect: return code %d", rc)
	}
	// sent: messages the node accepted, billed; refused: PUBLISHes it read
	// and refused, never billed.
	var sent, refused int64
	// Paced at 100 a second per client, half the plan's client rate.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for i := range 150 {
		<-tick.C
		if code := pub5.publishCode(t, "metered/v5", strconv.Itoa(i), false); code >= 0x80 {
			t.Fatalf("paho 5 publish %d: PUBACK %#x", i, code)
		}
		sent++
	}
	for i := range 100 {
		<-tick.C
		if tok := pub3.Publish("metered/v3", 1, false, strconv.Itoa(i)); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("paho 3.1.1 publish %d: %v", i, tok.Error())
		}
		sent++
	}
	host, port, _ := net.SplitHostPort(gw)
	if out, err := exec.CommandContext(ctx, "mosquitto_pub", "-h", host, "-p", port, "-u", cred.Username, "-P", cred.Password,
		"-V", "mqttv5", "-q", "1", "-t", "metered/mosquitto", "-m", "m", "-i", "meter-mosq").CombinedOutput(); err != nil {
		t.Fatalf("mosquitto_pub: %v %s", err, out)
	}
	sent++
	if code := s.Do(t, "POST", "/v1/tenants/"+metered.ID+"/publish", payer.APIKey, map[string]any{"topic": "metered/http", "payload": "h", "qos": 1}, nil); code/100 != 2 {
		t.Fatalf("HTTP publish: status %d", code)
	}
	sent++
	// Refused: outside the credential's ACL. The 3.1.1 client cannot be
	// told: its PUBACK says success, and the message goes nowhere.
	if code := pub5.publishCode(t, "forbidden/v5", "x", false); code != 0x87 {
		t.Fatalf("paho 5 publish outside the ACL: PUBACK %#x, want 0x87", code)
	}
	refused++
	if tok := pub3.Publish("forbidden/v3", 1, false, "x"); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("paho 3.1.1 publish outside the ACL: %v", tok.Error())
	}
	refused++
	for got := int64(0); got < sent; got++ {
		select {
		case <-sub.got:
		case <-time.After(10 * time.Second):
			t.Fatalf("the subscriber received %d of the %d messages sent", got, sent)
		}
	}

	// The node flushes its usage to Postgres every second: the minute rows
	// come to exactly what was read, and accepted.
	usageRows := func() (in, accepted int64) {
		if err := db.QueryRow(ctx, `SELECT coalesce(sum(messages_in), 0), coalesce(sum(messages_accepted), 0) FROM usage WHERE tenant_id = $1`,
			metered.ID).Scan(&in, &accepted); err != nil {
			t.Fatal(err)
		}
		return in, accepted
	}
	flushed := func() bool { in, _ := usageRows(); return in >= sent+refused }
	waitFor(t, 15*time.Second, fmt.Sprintf("the usage rows to count the %d PUBLISHes read", sent+refused), flushed)
	if in, accepted := usageRows(); in != sent+refused || accepted != sent {
		t.Fatalf("the usage rows count %d messages read, %d accepted; the node accepted %d and refused %d", in, accepted, sent, refused)
	}

	// Pro takes a 300 KiB message; the free plan's bound is 256 KiB. (No
	// one subscribes to big/#: PUBACK 0x10, no matching subscribers.)
	bigPayload := strings.Repeat("b", 300<<10)
	bigPub := mustConnectV5(t, gw, cred, "meter-big")
	if code := bigPub.publishCode(t, "big/one", bigPayload, false); code >= 0x80 {
		t.Fatalf("300 KiB on pro: PUBACK %#x", code)
	}
	sent++

	// A budget of one cent, capping: the first run of a worker on the real
	// clock drafts the month over it and caps the quotas, live.
	if code := s.Do(t, "PUT", "/v1/billing/budget", payer.APIKey, map[string]any{"monthly_cents": 1, "action": "cap"}, nil); code != http.StatusOK {
		t.Fatalf("put budget: status %d", code)
	}
	waitFor(t, 15*time.Second, "the usage rows to count the 300 KiB message", flushed)
	live := s.StartBilling(t, "billing (real clock)", "-interval", "1s")
	capStart := time.Now()
	var refusedAt time.Time
	capped := false
	for deadline := time.Now().Add(30 * time.Second); !capped; {
		if time.Now().After(deadline) {
			t.Fatalf("a 300 KiB publish is still taken 30 s after the budget's cap\n%s", live.Log())
		}
		refusedAt = time.Now()
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		pr, err := bigPub.Publish(pctx, &paho.Publish{Topic: "big/again", QoS: 1, Payload: []byte(bigPayload)})
		cancel()
		switch {
		case err == nil && pr.ReasonCode < 0x80:
			sent++
			time.Sleep(500 * time.Millisecond) // within pro's 1 MiB/s client byte rate
		case err == nil:
			t.Fatalf("300 KiB publish: PUBACK %#x, want success or DISCONNECT 0x95", pr.ReasonCode)
		default:
			capped = true
			refused++ // read (messages_in), not accepted: not billed
		}
	}
	select {
	case rc := <-bigPub.disconnected:
		if rc != 0x95 {
			t.Fatalf("300 KiB publish after the cap: DISCONNECT %#x, want 0x95 (packet too large)", rc)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("300 KiB publish after the cap: no DISCONNECT")
	}
	t.Logf("budget cap: a publish %v after the billing worker started was refused", refusedAt.Sub(capStart).Round(10*time.Millisecond))
	var quotas struct {
		Quotas struct {
			MaxMessageSize int64 `json:"max_message_size"`
		} `json:"quotas"`
	}
	if code := s.Do(t, "GET", "/v1/tenants/"+metered.ID+"/quotas", payer.APIKey, nil, &quotas); code != http.StatusOK || quotas.Quotas.MaxMessageSize != 256<<10 {
		t.Fatalf("quotas after the cap: status %d, max_message_size %d, want %d", code, quotas.Quotas.MaxMessageSize, 256<<10)
	}
	var budget struct {
		Notices []struct {
			Percent int  `json:"percent"`
			Capped  bool `json:"capped"`
		} `json:"notices"`
	}
	if code := s.Do(t, "GET", "/v1/billing/budget", payer.APIKey, nil, &budget); code != http.StatusOK || !hasNotice(budget.Notices, 100, true) {
		t.Fatalf("budget after the cap: status %d, notices %+v", code, budget.Notices)
	}
	if err := live.Stop(10 * time.Second); err != nil {
		t.Fatalf("billing worker after SIGTERM: %v", err)
	}

	// The month ends: the clients go, the node stops (its last usage
	// flushed), and the usage rows are what the invoice must show.
	_ = sub.Disconnect(&paho.Disconnect{})
	_ = pub5.Disconnect(&paho.Disconnect{})
	pub3.Disconnect(100)
	if err := s.Node.Stop(10 * time.Second); err != nil {
		t.Fatalf("node after SIGTERM: %v", err)
	}
	raw := map[string]map[string]int64{}
	rows, err := db.Query(ctx, `SELECT tenant_id, sum(messages_accepted), sum(connection_seconds), sum(stored_bytes::numeric * 60)::bigint,
		sum(bytes_in::numeric + bytes_out)::bigint FROM usage GROUP BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		var m, c, st, tr int64
		if err := rows.Scan(&id, &m, &c, &st, &tr); err != nil {
			t.Fatal(err)
		}
		raw[id] = map[string]int64{"messages": m, "connection_time": c, "storage": st, "transfer": tr}
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	if in, accepted := usageRows(); in != sent+refused || accepted != sent || raw[metered.ID]["messages"] != sent {
		t.Fatalf("the node's usage rows count %d messages read, %d accepted; the node accepted %d and refused %d", in, accepted, sent, refused)
	}

	// A worker whose clock is past the month's end and the 1 h grace
	// issues the month's invoices and pushes the payer's to stripe-mock.
	month := invoice.MonthOf(time.Now())
	end := month.AddDate(0, 1, 0)
	closer := s.StartBilling(t, "billing (clock at month end)", "-interval", "1s", "-now", end.Add(time.Hour+time.Second).Format(time.RFC3339))
	waitFor(t, 30*time.Second, "the month's invoices issued and the payer's pushed to stripe-mock", func() bool {
		var open, unpushed int
		err := db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status <> 'final'),
			count(*) FILTER (WHERE status = 'final' AND total_cents > 0 AND NOT EXISTS (SELECT 1 FROM invoice_payments p WHERE p.invoice_id = i.id))
			FROM invoices i WHERE month < $1`, end).Scan(&open, &unpushed)
		return err == nil && open == 0 && unpushed == 0
	})
	if err := closer.Stop(10 * time.Second); err != nil {
		t.Fatalf("billing worker after SIGTERM: %v", err)
	}
	if !strings.Contains(closer.Log(), "invoice pushed to stripe") {
		t.Errorf("the worker's log does not show the push:\n%s", closer.Log())
	}

	issued := finalInvoices(t, s, payer, end)
	if len(issued) == 0 {
		t.Fatal("no issued invoice")
	}
	// Rated apart from the worker: quantities from the usage rows, the pro
	// tenant's base seconds from its creation (whole seconds) to the end of
	// the month.
	var created time.Time
	if err := db.QueryRow(ctx, `SELECT created_at FROM tenants WHERE id = $1`, metered.ID).Scan(&created); err != nil {
		t.Fatal(err)
	}
	checkProRated(t, issued, metered.ID, raw, map[string]int64{invoice.Base: int64(end.Sub(created.Truncate(time.Second)) / time.Second),
		"messages": sent, "connection_time": raw[metered.ID]["connection_time"],
		"storage": raw[metered.ID]["storage"], "transfer": raw[metered.ID]["transfer"]})
	for _, in := range issued {
		var stripeID string
		if err := db.QueryRow(ctx, `SELECT stripe_invoice_id FROM invoice_payments WHERE invoice_id = $1`, in.ID).Scan(&stripeID); err != nil || !strings.HasPrefix(stripeID, "in_") {
			t.Errorf("invoice %s in Stripe as %q (%v)", in.ID, stripeID, err)
		}
	}
	for _, in := range finalInvoices(t, s, unpaid, end) {
		var pushed bool
		_ = db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM invoice_payments WHERE invoice_id = $1)`, in.ID).Scan(&pushed)
		if in.TotalCents != 0 || pushed {
			t.Errorf("the free account's invoice %s: total %d, pushed %v; want 0, not pushed", in.ID, in.TotalCents, pushed)
		}
	}

	// The printable PDF of the last one.
	last := issued[len(issued)-1]
	text := invoicePDFText(t, s, payer.APIKey, last)
	t.Logf("%d messages accepted (billed), %d refused (not billed); %d invoice(s) issued; invoice %d: %s, %d lines; walked in %v", sent, refused, len(issued), *last.Number,
		invoice.Money(last.TotalCents, "usd"), len(last.Lines), time.Since(began).Round(100*time.Millisecond))
	t.Logf("invoice %d as its PDF reads (pdftotext):\n%s", *last.Number, text)
}

// wantPaymentRequired fails unless a is 402 plan-not-entitled.
func wantPaymentRequired(t *testing.T, a httpAnswer) {
	t.Helper()
	var p struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(a.body, &p)
	if a.status != http.StatusPaymentRequired || !strings.HasSuffix(p.Type, "/plan-not-entitled") {
		t.Fatalf("a paid plan without a payment method: %v, want 402 plan-not-entitled", a)
	}
}

// postStripeEvent posts a Stripe event of typ about customer to the API's
// webhook, signed as Stripe signs (Stripe-Signature: t=…,v1=HMAC-SHA256 of
// "t.body" under secret), and returns the status.
func postStripeEvent(t *testing.T, s *stack.Stack, secret, typ, customer string) int {
	t.Helper()
	body, err := json.Marshal(map[string]any{"id": "evt_e2e_" + randomHexString(8), "object": "event", "type": typ,
		"created": time.Now().Unix(), "api_version": "2025-01-27.acacia",
		"data": map[string]any{"object": map[string]any{"id": "seti_e2e", "object": "setup_intent", "customer": customer}}})
	if err != nil {
		t.Fatal(err)
	}
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "." + string(body)))
	req, err := http.NewRequest("POST", s.API+"/v1/billing/webhook", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Stripe-Signature", "t="+ts+",v1="+hex.EncodeToString(mac.Sum(nil)))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

func hasNotice(ns []struct {
	Percent int  `json:"percent"`
	Capped  bool `json:"capped"`
}, percent int, capped bool) bool {
	for _, n := range ns {
		if n.Percent == percent && n.Capped == capped {
			return true
		}
	}
	return false
}
