package invoice

import (
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/go-pdf/fpdf"
)

// The PDF is the printable page of WriteHTML laid out on A4 landscape: the
// same heading, the same table (its columns repeated at the head of every
// page it runs on to; a cell too long for its column wraps) and the same
// note, in Helvetica (a PDF core font: nothing embedded). Text is
// Windows-1252 as the core fonts want it; the invoice's own text is ASCII
// (ids, slugs, plan names, descriptions), and a character Windows-1252
// lacks would print as ".". The document's dates are the
// invoice's own (issued, or last updated), so one invoice always renders
// to the same bytes.

// pdfColumn is one column of the line table.
type pdfColumn struct {
	head  string
	width float64 // mm
	align string  // fpdf alignment: "L" or "R"
}

var pdfColumns = []pdfColumn{
	{"#", 8, "R"}, {"Tenant", 40, "L"}, {"Item", 62, "L"}, {"Quantity", 44, "R"},
	{"Included", 44, "R"}, {"Rate", 53, "L"}, {"Amount", 26, "R"},
}

const (
	pdfMargin = 10.0 // mm, every side
	pdfLine   = 4.0  // mm, a line of text in the table
	pdfPad    = 1.0  // mm, above and below a row's text
	pdfFont   = 8.0  // pt, the table's
)

// WritePDF writes the document as a printable PDF.
func (in *Invoice) WritePDF(w io.Writer) error {
	pdf := fpdf.New("L", "mm", "A4", "")
	pdf.SetMargins(pdfMargin, pdfMargin, pdfMargin)
	pdf.SetAutoPageBreak(true, pdfMargin+6)
	pdf.SetCompression(true)
	pdf.SetCatalogSort(true)
	at := in.UpdatedAt
	if in.FinalizedAt != nil {
		at = *in.FinalizedAt
	}
	pdf.SetCreationDate(at)
	pdf.SetModificationDate(at)
	pdf.SetTitle(in.Title()+" - Berth", false)
	pdf.SetAuthor("Berth", false)
	pdf.SetProducer("Berth", false)
	tr := pdf.UnicodeTranslatorFromDescriptor("")
	pdf.AliasNbPages("{nb}")

	inTable := false
	header := func() {
		pdf.SetFont("Helvetica", "B", pdfFont)
		pdf.SetFillColor(238, 238, 238)
		for _, c := range pdfColumns {
			pdf.CellFormat(c.width, pdfLine+2*pdfPad, c.head, "B", 0, c.align, true, 0, "")
		}
		pdf.Ln(-1)
		pdf.SetFont("Helvetica", "", pdfFont)
	}
	pdf.SetHeaderFuncMode(func() {
		if inTable { // a page the table runs on to
			header()
		}
	}, false)
	pdf.SetFooterFunc(func() {
		pdf.SetY(-pdfMargin - 4)
		pdf.SetFont("Helvetica", "", 8)
		pdf.CellFormat(0, 4, tr(in.Title()+" · "+in.ID+" · page "+strconv.Itoa(pdf.PageNo())+" of {nb}"), "", 0, "R", false, 0, "")
	})
	pdf.AddPage()

	pdf.SetFont("Helvetica", "B", 18)
	title := in.Title()
	if in.Status == Draft {
		title += " (estimate, not issued)"
	}
	pdf.CellFormat(0, 10, tr(title), "", 1, "L", false, 0, "")
	pdf.SetFont("Helvetica", "", 10)
	if a := in.Amending(); a != "" {
		pdf.CellFormat(0, 5, tr("Amends "+a), "", 1, "L", false, 0, "")
	}
	pdf.CellFormat(0, 5, tr("Berth · account "+in.AccountID+" · document "+in.ID), "", 1, "L", false, 0, "")
	period := "Period " + pdfDate(in.Month) + " to " + pdfDate(in.PeriodEnd()) + " (UTC, end exclusive)"
	if in.FinalizedAt != nil {
		period += " · issued " + pdfDate(*in.FinalizedAt)
	} else {
		period += " · updated " + in.UpdatedAt.UTC().Format("2006-01-02 15:04 UTC")
	}
	pdf.CellFormat(0, 5, tr(period), "", 1, "L", false, 0, "")
	pdf.Ln(4)

	inTable = true
	header()
	_, pageH := pdf.GetPageSize()
	_, _, _, bottom := pdf.GetMargins()
	for _, l := range in.Lines {
		included := ""
		if l.Included != 0 {
			included = human(l.Meter, l.Included)
		}
		tenant := ""
		if l.TenantID != "" {
			tenant = l.TenantSlug + " (" + l.Plan + ")"
		}
		cells := [][]string{{strconv.Itoa(l.Line)}, {tenant}, {l.Description},
			{human(l.Meter, l.Quantity)}, {included}, {rateText(l.Meter, l.Rate, in.Currency)}, {Money(l.AmountCents, in.Currency)}}
		n := 1
		for i, c := range pdfColumns {
			cells[i] = wrap(pdf, tr(cells[i][0]), c.width-2*pdf.GetCellMargin())
			n = max(n, len(cells[i]))
		}
		h := float64(n)*pdfLine + 2*pdfPad
		if pdf.GetY()+h > pageH-bottom {
			pdf.AddPage() // the header function heads it with the columns
		}
		x, y := pdf.GetX(), pdf.GetY()
		for i, c := range pdfColumns {
			for k, text := range cells[i] {
				pdf.SetXY(x, y+pdfPad+float64(k)*pdfLine)
				pdf.CellFormat(c.width, pdfLine, text, "", 0, c.align, false, 0, "")
			}
			x += c.width
		}
		pdf.SetDrawColor(204, 204, 204)
		pdf.Line(pdfMargin, y+h, x, y+h)
		pdf.SetDrawColor(0, 0, 0)
		pdf.SetXY(pdfMargin, y+h)
	}
	inTable = false
	pdf.SetFont("Helvetica", "B", 10)
	totalWidth := 0.0
	for _, c := range pdfColumns[:len(pdfColumns)-1] {
		totalWidth += c.width
	}
	pdf.SetLineWidth(0.5)
	pdf.Line(pdfMargin, pdf.GetY(), pdfMargin+totalWidth+pdfColumns[len(pdfColumns)-1].width, pdf.GetY())
	pdf.CellFormat(totalWidth, pdfLine+2*pdfPad, "Total", "", 0, "L", false, 0, "")
	pdf.CellFormat(pdfColumns[len(pdfColumns)-1].width, pdfLine+2*pdfPad, tr(Money(in.TotalCents, in.Currency)), "T", 1, "R", false, 0, "")
	pdf.Ln(3)
	pdf.SetFont("Helvetica", "", 8)
	pdf.MultiCell(0, 4, "Amounts are rounded half up to the cent per line. A GB is 10^9 bytes; a GB-month is a GB held for 30 days.", "", "L", false)
	return pdf.Output(w)
}

// pdfDate is the HTML page's date format.
func pdfDate(t time.Time) string { return t.UTC().Format("2 January 2006") }

// wrap breaks s (already in the font's code page) into lines of at most
// width mm in the current font: at spaces, and a word longer than a line
// (a long tenant slug) wherever it must.
func wrap(pdf *fpdf.Fpdf, s string, width float64) []string {
	var lines []string
	cur := ""
	for _, word := range strings.Split(s, " ") {
		cand := word
		if cur != "" {
			cand = cur + " " + word
		}
		if pdf.GetStringWidth(cand) <= width {
			cur = cand
			continue
		}
		if cur != "" {
			lines = append(lines, cur)
		}
		for len(word) > 1 && pdf.GetStringWidth(word) > width {
			i := len(word) - 1
			for i > 1 && pdf.GetStringWidth(word[:i]) > width {
				i--
			}
			lines = append(lines, word[:i])
			word = word[i:]
		}
		cur = word
	}
	return append(lines, cur)
}
