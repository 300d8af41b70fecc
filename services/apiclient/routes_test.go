package apiclient

import (
	"encoding/json"
	"strings"
	"testing"

	"berth.dev/services/internal/openapi"
)

// TestRoutesExistInOpenAPI: every (method, path) the client can call is an
// operation of the served OpenAPI document.
func TestRoutesExistInOpenAPI(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(openapi.Document(), &doc); err != nil {
		t.Fatal(err)
	}
	if len(Routes) == 0 {
		t.Fatal("no routes")
	}
	for _, r := range Routes {
		ops, ok := doc.Paths[r.Path]
		if !ok {
			t.Errorf("%s %s: path not in openapi.json", r.Method, r.Path)
			continue
		}
		if _, ok := ops[strings.ToLower(r.Method)]; !ok {
			t.Errorf("%s %s: method not in openapi.json", r.Method, r.Path)
		}
	}
}

func TestExpand(t *testing.T) {
	got, err := IssueToken.Expand("ten_1", "a b/c")
	if err != nil || got != "/v1/tenants/ten_1/credentials/a%20b%2Fc/token" {
		t.Fatalf("%q %v", got, err)
	}
	if _, err := IssueToken.Expand("ten_1"); err == nil {
		t.Fatal("missing argument accepted")
	}
	if _, err := ListTenants.Expand("x"); err == nil {
		t.Fatal("extra argument accepted")
	}
}
