package plan

import (
	"fmt"
	"math/big"
)

// Meter is one metered dimension of a tenant's usage. Quantities are exact
// integers in the meter's unit; included amounts and rates are in the same
// unit.
type Meter string

const (
	// Messages counts messages accepted (usage.messages_accepted: the
	// PUBLISHes the nodes took on, HTTP publishes, wills published; never
	// a refused PUBLISH), the count the monthly_messages quota caps.
	Messages Meter = "messages"
	// ConnectionTime counts connection-seconds.
	ConnectionTime Meter = "connection_time"
	// Storage counts byte-seconds of message-log storage: each minute's
	// stored bytes held for 60 seconds.
	Storage Meter = "storage"
	// Transfer counts bytes in and out.
	Transfer Meter = "transfer"
)

// Meters lists the meters in the order invoice lines show them.
func Meters() []Meter { return []Meter{Messages, ConnectionTime, Storage, Transfer} }

// Unit names a meter's unit.
func (m Meter) Unit() string {
	switch m {
	case Messages:
		return "message"
	case ConnectionTime:
		return "connection-second"
	case Storage:
		return "byte-second"
	case Transfer:
		return "byte"
	}
	return ""
}

// Units of the price table.
const (
	GB = 1_000_000_000 // bytes (decimal, as transfer is priced)
	// MonthSeconds is the month of a GB-month: 30 days. A GB-month is
	// GB × MonthSeconds byte-seconds, whatever the calendar month's length.
	MonthSeconds = 30 * 24 * 60 * 60
	// GBMonth is one GB-month in byte-seconds.
	GBMonth = GB * MonthSeconds
	// ConnectionMinute is one connection-minute in connection-seconds.
	ConnectionMinute = 60
)

// Rate is Cents per Per units: an exact rational price per unit. Per is
// positive.
type Rate struct {
	Cents int64 `json:"cents"`
	Per   int64 `json:"per"`
}

// Amount returns q units at r in cents, rounded half up to a whole cent;
// exact for any q (the product is taken in arbitrary precision) and an
// error if the result does not fit an int64.
func (r Rate) Amount(q int64) (int64, error) {
	n := new(big.Int).Mul(big.NewInt(q), big.NewInt(r.Cents))
	n.Mul(n, big.NewInt(2))
	n.Add(n, big.NewInt(r.Per))
	n.Quo(n, big.NewInt(2*r.Per)) // floor((2·q·c + per) / 2·per) = round half up for q·c ≥ 0
	if !n.IsInt64() {
		return 0, fmt.Errorf("plan: %d units at %d/%d cents overflow", q, r.Cents, r.Per)
	}
	return n.Int64(), nil
}

// Prorate returns v × part / whole rounded half up to a whole unit (exact
// for any v, in arbitrary precision): a plan's monthly amount for part of a
// month's whole seconds. whole is positive; 0 ≤ part.
func Prorate(v, part, whole int64) (int64, error) {
	return Rate{Cents: v, Per: whole}.Amount(part)
}

// MeterPrice is what a plan includes of a meter each month and what it
// charges beyond that. Overage nil means a hard cap: nothing is charged
// (the plan's quotas stop the usage instead).
type MeterPrice struct {
	Included int64 `json:"included"`
	Overage  *Rate `json:"overage"`
}

// Price is a plan's monthly price per tenant, in the smallest unit of
// Currency, and its meters' prices.
type Price struct {
	Currency     string               `json:"currency"`
	MonthlyCents int64                `json:"monthly_cents"`
	Meters       map[Meter]MeterPrice `json:"meters"`
}

// prices is the price table (docs/billing.md shows it).
var prices = map[string]Price{
	// free: hard caps, no overage; what it includes is what its quotas
	// allow (monthly_messages 1,000,000).
	"free": {Currency: "usd", MonthlyCents: 0, Meters: map[Meter]MeterPrice{
		Messages:       {Included: 1_000_000},
		ConnectionTime: {Included: 1_000_000 * ConnectionMinute},
		Storage:        {Included: GBMonth / 10},
		Transfer:       {Included: 1 * GB},
	}},
	"pro": {Currency: "usd", MonthlyCents: 49_00, Meters: map[Meter]MeterPrice{
		Messages:       {Included: 100_000_000, Overage: &Rate{Cents: 20, Per: 1_000_000}},                                  // $0.20 per million
		ConnectionTime: {Included: 50_000_000 * ConnectionMinute, Overage: &Rate{Cents: 1, Per: 10_000 * ConnectionMinute}}, // $0.01 per 10,000 connection-minutes
		Storage:        {Included: 10 * GBMonth, Overage: &Rate{Cents: 10, Per: GBMonth}},                                   // $0.10 per GB-month
		Transfer:       {Included: 100 * GB, Overage: &Rate{Cents: 5, Per: GB}},                                             // $0.05 per GB
	}},
	"business": {Currency: "usd", MonthlyCents: 499_00, Meters: map[Meter]MeterPrice{
		Messages:       {Included: 1_000_000_000, Overage: &Rate{Cents: 10, Per: 1_000_000}},
		ConnectionTime: {Included: 500_000_000 * ConnectionMinute, Overage: &Rate{Cents: 1, Per: 20_000 * ConnectionMinute}},
		Storage:        {Included: 200 * GBMonth, Overage: &Rate{Cents: 8, Per: GBMonth}},
		Transfer:       {Included: 2_000 * GB, Overage: &Rate{Cents: 4, Per: GB}},
	}},
}

// PriceOf returns the price of the plan called name.
func PriceOf(name string) (Price, error) {
	p, ok := prices[name]
	if !ok {
		return Price{}, fmt.Errorf("%w %q", ErrUnknown, name)
	}
	return p, nil
}
