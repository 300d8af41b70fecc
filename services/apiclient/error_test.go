package apiclient

import (
	"strings"
	"testing"
)

// A validation problem's detail repeats its fields ("f: reason; ..."):
// Error names each field once; other problems keep their detail.
func TestErrorNamesEachFieldOnce(t *testing.T) {
	v := &Error{Status: 422, Title: "Invalid input", Detail: "email: is required; password: must be at least 10 characters",
		Fields: []FieldError{{"email", "is required"}, {"password", "must be at least 10 characters"}}}
	if got, want := v.Error(), "HTTP 422: Invalid input; email: is required; password: must be at least 10 characters"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	p := &Error{Status: 402, Title: "Plan not available to this account", Detail: `this account is not entitled to the "pro" plan; it may use: free`,
		Fields: []FieldError{{"plan", "the account is not entitled to this plan"}}}
	if got := p.Error(); !strings.Contains(got, "it may use: free") || strings.Count(got, "plan:") != 1 {
		t.Fatalf("got %q, want the detail and the field once", got)
	}
}
