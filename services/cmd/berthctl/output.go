package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// table prints rows under header, columns aligned.
func table(w io.Writer, header []string, rows [][]string) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	tw.Flush()
}

// printJSON writes the API's JSON answer indented, one document.
func printJSON(w io.Writer, raw json.RawMessage) error {
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		return err
	}
	b.WriteByte('\n')
	_, err := w.Write(b.Bytes())
	return err
}

// listing decodes raw into out for a table, or prints it when asJSON;
// it reports whether the caller should print the table.
func listing(e *env, raw json.RawMessage, asJSON bool, out any) (bool, error) {
	if asJSON {
		return false, printJSON(e.stdout, raw)
	}
	return true, json.Unmarshal(raw, out)
}

// when formats a time for a table: local, to the second; "-" for none.
func when(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

// orDash is s, or "-" when empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// num formats an optional integer.
func num(p *int64) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprint(*p)
}
