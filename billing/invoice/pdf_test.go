package invoice

import (
	"bytes"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"berth.dev/billing/plan"
)

// pdfText is the text of a PDF as poppler's pdftotext reads it, one
// string per page: with mode "-layout" as laid out on the page, with
// "-raw" in the order it was drawn (a table row's cells one after the
// other, a wrapped cell's lines together), every run of white space made
// one space. Reading it back with another program than fpdf proves more
// than reading our own bytes. infra/dev/tools.sh installs poppler-utils.
func pdfText(t *testing.T, pdf []byte, mode string) []string {
	t.Helper()
	if _, err := exec.LookPath("pdftotext"); err != nil {
		t.Fatalf("pdftotext not found (%v): run infra/dev/tools.sh (Debian poppler-utils)", err)
	}
	cmd := exec.Command("pdftotext", mode, "-enc", "UTF-8", "-", "-")
	cmd.Stdin = bytes.NewReader(pdf)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil || errb.Len() > 0 {
		t.Fatalf("pdftotext: %v %s", err, errb.String())
	}
	pages := strings.Split(strings.TrimSuffix(out.String(), "\f"), "\f")
	if mode == "-raw" {
		for i, p := range pages {
			pages[i] = strings.Join(strings.Fields(p), " ")
		}
	}
	return pages
}

var startxref = regexp.MustCompile(`startxref\s+(\d+)\s+%%EOF\s*$`)

// checkPDFStructure checks the file's frame by hand: the header, the
// cross-reference table that startxref points at, every in-use entry
// pointing at its own object, and a trailer naming the catalog.
func checkPDFStructure(t *testing.T, b []byte) {
	t.Helper()
	if !bytes.HasPrefix(b, []byte("%PDF-1.")) {
		t.Fatalf("no PDF header: %q", b[:min(len(b), 16)])
	}
	m := startxref.FindSubmatch(b)
	if m == nil {
		t.Fatalf("no startxref/%%%%EOF at the end: %q", b[max(0, len(b)-64):])
	}
	off, _ := strconv.Atoi(string(m[1]))
	if off <= 0 || off >= len(b) || !bytes.HasPrefix(b[off:], []byte("xref")) {
		t.Fatalf("startxref %d does not point at the xref table", off)
	}
	rest := bytes.TrimLeft(b[off+len("xref"):], "\r\n")
	eol := bytes.IndexByte(rest, '\n')
	sub := strings.Fields(string(rest[:max(eol, 0)]))
	if len(sub) != 2 || sub[0] != "0" {
		t.Fatalf("xref subsection %q", sub)
	}
	n, err := strconv.Atoi(sub[1])
	if err != nil || n < 2 || len(rest) < eol+1+n*20 {
		t.Fatalf("xref subsection %q: %v", sub, err)
	}
	entries := rest[eol+1:]
	for obj := 0; obj < n; obj++ {
		e := string(entries[obj*20 : obj*20+20])
		var at, gen int
		var kind string
		if _, err := fmt.Sscanf(e, "%d %d %s", &at, &gen, &kind); err != nil {
			t.Fatalf("xref entry %d %q: %v", obj, e, err)
		}
		if kind != "n" {
			continue
		}
		if want := fmt.Sprintf("%d 0 obj", obj); !bytes.HasPrefix(b[at:], []byte(want)) {
			t.Fatalf("xref entry %d points at %q, want %q", obj, b[at:at+12], want)
		}
	}
	trailer := entries[n*20:]
	if !bytes.HasPrefix(bytes.TrimSpace(trailer), []byte("trailer")) || !bytes.Contains(trailer, fmt.Appendf(nil, "/Size %d", n)) ||
		!bytes.Contains(trailer, []byte("/Root")) {
		t.Fatalf("trailer %q", trailer[:min(len(trailer), 200)])
	}
}

// The PDF holds what the HTML page holds: title, account, document, period,
// every line with its quantity, included amount, rate and amount, and the
// total; draft PDFs say they are estimates; the same invoice is the same
// bytes.
func TestPDF(t *testing.T) {
	in := sample(t)
	var b bytes.Buffer
	if err := in.WritePDF(&b); err != nil {
		t.Fatal(err)
	}
	checkPDFStructure(t, b.Bytes())
	pages := pdfText(t, b.Bytes(), "-raw")
	if len(pages) != 1 {
		t.Fatalf("%d pages, want 1", len(pages))
	}
	text := pages[0]
	for _, want := range []string{"Invoice 7", "account acc_x", "document inv_x", "Period 1 January 2026 to 1 February 2026",
		"issued 1 February 2026", "USD 50.53", "USD 1.03", "20.500 GB", "USD 0.05 per 1 GB", "102,500,000 messages",
		"included (hard cap)", "<b>factory</b> (free)", "page 1 of 1", "GB-month is a GB held for 30 days",
		"# Tenant Item Quantity Included Rate Amount"} {
		if !strings.Contains(text, want) {
			t.Errorf("PDF text lacks %q", want)
		}
	}
	// Each line is one row: the cells of the HTML page, in order.
	for _, l := range in.Lines {
		if row := pdfRow(l, in.Currency); !strings.Contains(text, row) {
			t.Errorf("no row %q in\n%s", row, text)
		}
	}
	if !strings.Contains(text, "Total USD 50.53") {
		t.Errorf("no total in\n%s", text)
	}

	var again bytes.Buffer
	if err := in.WritePDF(&again); err != nil || !bytes.Equal(again.Bytes(), b.Bytes()) {
		t.Errorf("the same invoice rendered twice differs (%v)", err)
	}

	draft := sample(t)
	draft.Status, draft.Number, draft.FinalizedAt = Draft, nil, nil
	b.Reset()
	if err := draft.WritePDF(&b); err != nil {
		t.Fatal(err)
	}
	if text := pdfText(t, b.Bytes(), "-raw")[0]; !strings.Contains(text, "Draft invoice (estimate, not issued)") || !strings.Contains(text, "updated 2026-02-01 01:00 UTC") {
		t.Fatalf("draft PDF:\n%s", text)
	}
}

// pdfRow is line l as the HTML page shows it, its cells in order, one
// space apart.
func pdfRow(l Line, currency string) string {
	cells := []string{strconv.Itoa(l.Line), l.TenantSlug + " (" + l.Plan + ")", l.Description, human(l.Meter, l.Quantity)}
	if l.Included != 0 {
		cells = append(cells, human(l.Meter, l.Included))
	}
	return strings.Join(append(cells, rateText(l.Meter, l.Rate, currency), Money(l.AmountCents, currency)), " ")
}

// A long invoice runs onto more pages, each headed by the table's columns,
// with every line on one of them; a slug too long for its column is cut
// with an ellipsis, not run into the next.
func TestPDFPages(t *testing.T) {
	month := time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)
	var tenants []TenantUsage
	for i := range 40 {
		tenants = append(tenants, TenantUsage{TenantID: fmt.Sprintf("ten_%03d", i), Slug: fmt.Sprintf("tenant-%03d", i), Plan: "pro",
			ActiveSeconds: 28 * 86400, Usage: map[plan.Meter]int64{plan.Messages: int64(i) * 10_000_000}})
	}
	tenants[0].Slug = strings.Repeat("very-long-slug-", 8)
	lines, total, cur, err := Rate(month, tenants)
	if err != nil {
		t.Fatal(err)
	}
	in := &Invoice{ID: "inv_long", AccountID: "acc_y", Kind: "invoice", Status: Draft, Month: month, Currency: cur,
		TotalCents: total, CreatedAt: month, UpdatedAt: month.Add(time.Hour), Lines: lines}
	var b bytes.Buffer
	if err := in.WritePDF(&b); err != nil {
		t.Fatal(err)
	}
	checkPDFStructure(t, b.Bytes())
	pages := pdfText(t, b.Bytes(), "-raw")
	if len(pages) < 3 {
		t.Fatalf("%d lines on %d pages", len(lines), len(pages))
	}
	all := strings.Join(pages, " ")
	for i, p := range pages {
		head := "# Tenant Item Quantity Included Rate Amount "
		if i == 0 {
			head = "Draft invoice (estimate, not issued) Berth · account acc_y · document inv_long Period 1 February 2026 to 1 March 2026 " +
				"(UTC, end exclusive) · updated 2026-02-01 01:00 UTC " + head
		}
		if !strings.HasPrefix(p, head) {
			t.Errorf("page %d is not headed by the table's columns:\n%s", i+1, p)
		}
		if want := fmt.Sprintf("page %d of %d", i+1, len(pages)); !strings.HasSuffix(p, want) {
			t.Errorf("page %d does not end with %q", i+1, want)
		}
	}
	for _, l := range lines[5:] {
		if row := pdfRow(l, cur); !strings.Contains(all, row) {
			t.Errorf("no row %q", row)
		}
	}
	// The long slug wraps within its column: its pieces in order, then the
	// rest of the row.
	squeeze := func(s string) string { return strings.ReplaceAll(s, " ", "") }
	if row := pdfRow(lines[0], cur); !strings.Contains(squeeze(all), squeeze(row)) {
		t.Errorf("no row %q", row)
	}
	if strings.Contains(all, tenants[0].Slug) {
		t.Errorf("the long slug is on one line: it runs over its column")
	}
	if !strings.HasSuffix(strings.TrimSuffix(pages[len(pages)-1], fmt.Sprintf(" page %d of %d", len(pages), len(pages))),
		"Total "+Money(total, cur)+" Amounts are rounded half up to the cent per line. A GB is 10^9 bytes; a GB-month is a GB held for 30 days. Draft invoice · inv_long ·") {
		t.Errorf("the last page does not end with the total and the note:\n%s", pages[len(pages)-1])
	}
	t.Logf("%d lines: %d pages, %d bytes", len(lines), len(pages), b.Len())
}
