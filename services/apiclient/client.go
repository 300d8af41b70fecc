// Package apiclient is a small client for the Berth REST API, shared by
// berthctl, the e2e tests and users. Every request goes through a Route
// listed in Routes, which a test checks against the OpenAPI document.
package apiclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Client calls one API with one bearer token (session token or API key).
type Client struct {
	Base  string // e.g. http://127.0.0.1:8080, no trailing slash
	Token string // bearer; empty for signup and login
	HTTP  *http.Client
}

// New returns a Client for base with a 30 s request timeout.
func New(base, token string) *Client {
	return &Client{Base: strings.TrimRight(base, "/"), Token: token, HTTP: &http.Client{Timeout: 30 * time.Second}}
}

// Error is a non-2xx answer, with the API's problem document when it sent one.
type Error struct {
	Status int
	Title  string
	Detail string
	Fields []FieldError
	Body   string // the raw answer when it was not a problem document
}

// FieldError names a rejected field and why.
type FieldError struct {
	Field  string `json:"field"`
	Reason string `json:"reason"`
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP %d", e.Status)
	switch {
	case e.Title != "" && len(e.Fields) > 0 && strings.HasPrefix(e.Detail, e.Fields[0].Field+": "):
		// A validation detail repeats the fields listed below.
		fmt.Fprintf(&b, ": %s", e.Title)
	case e.Title != "" && e.Detail != "":
		fmt.Fprintf(&b, ": %s: %s", e.Title, e.Detail)
	case e.Title != "":
		fmt.Fprintf(&b, ": %s", e.Title)
	case e.Body != "":
		fmt.Fprintf(&b, ": %s", e.Body)
	}
	for _, f := range e.Fields {
		fmt.Fprintf(&b, "; %s: %s", f.Field, f.Reason)
	}
	return b.String()
}

// Call sends r with path parameters args (in the order of r.Path's
// {placeholders}), optional query and JSON body in, and decodes a JSON answer
// into out (which may be a *json.RawMessage, or nil to discard it).
func (c *Client) Call(ctx context.Context, r Route, args []string, query url.Values, in, out any) error {
	path, err := r.Expand(args...)
	if err != nil {
		return err
	}
	if len(query) > 0 {
		path += "?" + query.Encode()
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, c.Base+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		e := &Error{Status: resp.StatusCode}
		var p struct {
			Title  string       `json:"title"`
			Detail string       `json:"detail"`
			Errors []FieldError `json:"errors"`
		}
		if json.Unmarshal(raw, &p) == nil && p.Title != "" {
			e.Title, e.Detail, e.Fields = p.Title, p.Detail, p.Errors
		} else {
			e.Body = strings.TrimSpace(string(raw))
		}
		return e
	}
	if out == nil || len(raw) == 0 {
		return nil
	}
	return json.Unmarshal(raw, out)
}
