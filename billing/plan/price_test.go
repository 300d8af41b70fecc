package plan

import (
	"math"
	"testing"
)

func TestRateAmountRoundsHalfUpExactly(t *testing.T) {
	for _, c := range []struct {
		r    Rate
		q    int64
		want int64
	}{
		{Rate{5, GB}, 20_500_000_000, 103},               // 102.5 → 103
		{Rate{5, GB}, 20_499_999_999, 102},               // 102.4999… → 102
		{Rate{20, 1_000_000}, 10_000_123, 200},           // 200.00246
		{Rate{1, 600_000}, 12_345_678, 21},               // 20.576
		{Rate{4900, 31 * 86400}, 21*86400 + 43200, 3398}, // a prorated month
		{Rate{10, GBMonth}, 0, 0},
		{Rate{math.MaxInt64, 1}, 1, math.MaxInt64},
		// q·cents overflows int64 but the amount does not.
		{Rate{3, 1_000_000_000}, math.MaxInt64 / 2, 13_835_058_055},
	} {
		if got, err := c.r.Amount(c.q); err != nil || got != c.want {
			t.Errorf("%d at %d/%d = %d, %v; want %d", c.q, c.r.Cents, c.r.Per, got, err, c.want)
		}
	}
	if _, err := (Rate{math.MaxInt64, 1}).Amount(2); err == nil {
		t.Error("an amount past int64: no error")
	}
}

// Every plan is priced; free has hard caps only (no overage), the paid
// plans an overage rate on every meter and a monthly price.
func TestEveryPlanIsPriced(t *testing.T) {
	for _, name := range Names() {
		p, err := PriceOf(name)
		if err != nil {
			t.Fatal(err)
		}
		if p.Currency != "usd" {
			t.Errorf("%s: currency %q", name, p.Currency)
		}
		for _, m := range Meters() {
			mp, ok := p.Meters[m]
			switch {
			case !ok:
				t.Errorf("%s: meter %s unpriced", name, m)
			case name == "free" && mp.Overage != nil:
				t.Errorf("free: %s has an overage rate; free has hard caps", m)
			case name != "free" && (mp.Overage == nil || mp.Overage.Per <= 0 || mp.Overage.Cents <= 0):
				t.Errorf("%s: %s has no overage rate", name, m)
			}
		}
		if (name == "free") != (p.MonthlyCents == 0) {
			t.Errorf("%s: monthly %d cents", name, p.MonthlyCents)
		}
	}
	// free includes exactly what its monthly_messages quota allows.
	free, _ := Lookup("free")
	fp, _ := PriceOf("free")
	if fp.Meters[Messages].Included != free.Max.MonthlyMessages {
		t.Errorf("free includes %d messages, its quota caps %d", fp.Meters[Messages].Included, free.Max.MonthlyMessages)
	}
	if _, err := PriceOf("gold"); err == nil {
		t.Error("unknown plan priced")
	}
}
