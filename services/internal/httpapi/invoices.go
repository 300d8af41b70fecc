package httpapi

import (
	"bytes"
	"net/http"

	"github.com/go-chi/chi/v5"

	"berth.dev/billing/invoice"
)

// Invoices are the billing worker's documents (docs/billing.md): the
// running month's draft (the estimate) and the issued invoices of past
// months. Another account's invoice is 404, as is an id that does not
// exist.

func (a *api) listInvoices(w http.ResponseWriter, r *http.Request) error {
	p, err := parsePage(r)
	if err != nil {
		return err
	}
	ins, next, err := a.store.ListInvoices(r.Context(), principalFrom(r.Context()).AccountID, p)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, newList(ins, next))
}

// getInvoice answers /v1/invoices/{id} (format json), {id}.csv (csv),
// {id}.html (html, a printable page) and {id}.pdf (pdf, the same page as a
// PDF document).
func (a *api) getInvoice(format string) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error { return a.writeInvoice(w, r, format) }
}

func (a *api) writeInvoice(w http.ResponseWriter, r *http.Request, format string) error {
	id := chi.URLParam(r, "id")
	in, err := a.store.GetInvoice(r.Context(), principalFrom(r.Context()).AccountID, id)
	if err != nil {
		return err
	}
	var (
		b     bytes.Buffer
		ctype string
	)
	switch format {
	case "json":
		return writeJSON(w, http.StatusOK, in)
	case "csv":
		err, ctype = in.WriteCSV(&b), "text/csv; charset=utf-8"
		w.Header().Set("Content-Disposition", `attachment; filename="berth-`+filename(&in)+`.csv"`)
	case "html":
		err, ctype = in.WriteHTML(&b), "text/html; charset=utf-8"
		// The page is ours alone: no scripts, no framing elsewhere.
		w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'self'")
	case "pdf":
		err, ctype = in.WritePDF(&b), "application/pdf"
		w.Header().Set("Content-Disposition", `inline; filename="berth-`+filename(&in)+`.pdf"`)
	}
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", ctype)
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(b.Bytes())
	return nil
}

// filename is "invoice-2026-01-inv_…" for a download.
func filename(in *invoice.Invoice) string {
	return in.Kind + "-" + in.Month.Format("2006-01") + "-" + in.ID
}
