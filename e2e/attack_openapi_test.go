package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/base32"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"berth.dev/e2e/internal/stack"
)

// apiOp is one operation of the API's OpenAPI document, as the attack
// suite calls it: every path parameter filled, the required query
// parameters set, and a minimal valid body when the operation takes one.
type apiOp struct {
	Method, Path string
	// Query holds the required query parameters by name (no values yet).
	Query []string
	// Body is the JSON body to send; nil when the operation has none.
	Body any
	// BodySchema names the request body's schema, for messages.
	BodySchema string
}

func (o apiOp) String() string { return o.Method + " " + o.Path }

// openAPIDoc is the part of an OpenAPI 3.1 document the suite reads.
type openAPIDoc struct {
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components struct {
		Parameters map[string]openAPIParam `json:"parameters"`
		Schemas    map[string]any          `json:"schemas"`
	} `json:"components"`
}

type openAPIParam struct {
	Ref      string `json:"$ref"`
	Name     string `json:"name"`
	In       string `json:"in"`
	Required bool   `json:"required"`
}

type openAPIOperation struct {
	Parameters  []openAPIParam `json:"parameters"`
	RequestBody *struct {
		Content map[string]struct {
			Schema map[string]any `json:"schema"`
		} `json:"content"`
	} `json:"requestBody"`
}

// tenantOperations fetches /v1/openapi.json from the running API and
// returns every operation whose path holds {tid}, in a stable order, with
// a body built by bodyFor.
func tenantOperations(t *testing.T, s *stack.Stack, bodyFor func(schemaName string, schema map[string]any) any) []apiOp {
	t.Helper()
	res, err := http.Get(s.API + "/v1/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/openapi.json: %d %v", res.StatusCode, err)
	}
	var doc openAPIDoc
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	var ops []apiOp
	for path, item := range doc.Paths {
		if !strings.Contains(path, "{tid}") {
			continue
		}
		var shared []openAPIParam
		if p, ok := item["parameters"]; ok {
			if err := json.Unmarshal(p, &shared); err != nil {
				t.Fatalf("%s parameters: %v", path, err)
			}
		}
		for method, rawOp := range item {
			switch method {
			case "get", "put", "post", "delete", "patch", "head", "options", "trace":
			default:
				continue // parameters, summary, servers …
			}
			var op openAPIOperation
			if err := json.Unmarshal(rawOp, &op); err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
			o := apiOp{Method: strings.ToUpper(method), Path: path}
			for _, p := range append(append([]openAPIParam{}, shared...), op.Parameters...) {
				if name, ok := strings.CutPrefix(p.Ref, "#/components/parameters/"); ok {
					p = doc.Components.Parameters[name]
				}
				if p.In == "query" && p.Required {
					o.Query = append(o.Query, p.Name)
				}
			}
			if op.RequestBody != nil {
				media, ok := op.RequestBody.Content["application/json"]
				if !ok {
					t.Fatalf("%s: a request body that is not application/json: the attack suite sends JSON only; extend it", o)
				}
				schema, name := resolveSchema(doc, media.Schema)
				o.BodySchema = name
				o.Body = bodyFor(name, schema)
				if o.Body == nil {
					o.Body = minimalValue(doc, schema)
				}
			}
			ops = append(ops, o)
		}
	}
	sort.Slice(ops, func(i, j int) bool {
		if ops[i].Path != ops[j].Path {
			return ops[i].Path < ops[j].Path
		}
		return ops[i].Method < ops[j].Method
	})
	return ops
}

// resolveSchema follows a $ref into components.schemas; it returns the
// schema and its component name ("" for an inline schema).
func resolveSchema(doc openAPIDoc, schema map[string]any) (map[string]any, string) {
	ref, _ := schema["$ref"].(string)
	name, ok := strings.CutPrefix(ref, "#/components/schemas/")
	if !ok {
		return schema, ""
	}
	s, _ := doc.Components.Schemas[name].(map[string]any)
	return s, name
}

// minimalValue builds the smallest value a JSON schema admits: an object
// with its required properties only, the first enum value, an example,
// the minimum of a number.
func minimalValue(doc openAPIDoc, schema map[string]any) any {
	schema, _ = resolveSchema(doc, schema)
	if ex, ok := schema["example"]; ok {
		return ex
	}
	if enum, ok := schema["enum"].([]any); ok && len(enum) > 0 {
		return enum[0]
	}
	typ, _ := schema["type"].(string)
	if types, ok := schema["type"].([]any); ok { // ["integer", "null"]
		for _, x := range types {
			if x != "null" {
				typ, _ = x.(string)
				break
			}
		}
	}
	switch typ {
	case "object":
		out := map[string]any{}
		props, _ := schema["properties"].(map[string]any)
		req, _ := schema["required"].([]any)
		for _, r := range req {
			name, _ := r.(string)
			p, _ := props[name].(map[string]any)
			out[name] = minimalValue(doc, p)
		}
		return out
	case "array":
		return []any{}
	case "integer", "number":
		if m, ok := schema["minimum"].(float64); ok {
			return m
		}
		return 1
	case "boolean":
		return false
	case "string":
		if schema["format"] == "date-time" {
			return time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
		}
		return "x"
	}
	return nil
}

// pathValue fills one path parameter: A's real value, and the value of
// the same kind that nothing has.
type pathValue struct {
	own    string
	random string
	// global: the value is an id unique across tenants (a tenant-local
	// name such as a client id is not).
	global bool
}

// pathParam matches a path parameter with the segment before it.
var pathParam = regexp.MustCompile(`([^/]+)/\{([^}]+)\}`)

// fillPath substitutes every path parameter of path, choosing values by
// "<segment>/{param}"; own picks A's value (else the random one) for each
// key. It fails the test naming op for a parameter that has no value, so
// that a new route makes the suite be extended rather than skipped.
func fillPath(t *testing.T, op apiOp, values map[string]pathValue, pick func(key string, v pathValue) string) string {
	t.Helper()
	var missing []string
	out := pathParam.ReplaceAllStringFunc(op.Path, func(m string) string {
		sub := pathParam.FindStringSubmatch(m)
		key := sub[1] + "/{" + sub[2] + "}"
		v, ok := values[key]
		if !ok {
			missing = append(missing, key)
			return m
		}
		return sub[1] + "/" + pick(key, v)
	})
	if len(missing) > 0 {
		t.Fatalf("%s: the attack suite does not know how to fill %v: add a real value of account A's for it in the path values of TestAttackRESTWalk", op, missing)
	}
	return out
}

// pathKeys lists the "<segment>/{param}" keys of op's path.
func pathKeys(op apiOp) []string {
	var keys []string
	for _, sub := range pathParam.FindAllStringSubmatch(op.Path, -1) {
		keys = append(keys, sub[1]+"/{"+sub[2]+"}")
	}
	return keys
}

// withQuery appends op's required query parameters from values, failing
// the test for one it does not know.
func withQuery(t *testing.T, op apiOp, path string, values map[string]string) string {
	t.Helper()
	var q []string
	for _, name := range op.Query {
		v, ok := values[name]
		if !ok {
			t.Fatalf("%s: the attack suite does not know how to fill the required query parameter %q: add it to the query values of TestAttackRESTWalk", op, name)
		}
		q = append(q, name+"="+v)
	}
	if len(q) == 0 {
		return path
	}
	return path + "?" + strings.Join(q, "&")
}

// newID is an id of the API's form (prefix, "_", lowercase base32 of 10
// random bytes) that no row has.
func newID(prefix string) string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return prefix + "_" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}

func randomHexString(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// httpAnswer is an answer as it came off the wire.
type httpAnswer struct {
	status      int
	contentType string
	body        []byte
}

func (a httpAnswer) String() string { return fmt.Sprintf("%d %s %s", a.status, a.contentType, a.body) }

// call sends one request with token as Bearer and requestID as
// X-Request-Id, and returns the answer whole. A 429 with Retry-After (the
// account's write rate) is waited out and the request sent again, as a
// well-behaved client does, at most 20 times.
func call(t testing.TB, s *stack.Stack, method, path, token, requestID string, body any) httpAnswer {
	t.Helper()
	for range 20 {
		got, retry := callOnce(t, s, method, path, token, requestID, body)
		if got.status != http.StatusTooManyRequests || retry <= 0 {
			return got
		}
		time.Sleep(min(retry, 5*time.Second))
	}
	t.Fatalf("%s %s: still 429 after 20 tries", method, path)
	return httpAnswer{}
}

func callOnce(t testing.TB, s *stack.Stack, method, path, token, requestID string, body any) (httpAnswer, time.Duration) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, s.API+path, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if requestID != "" {
		req.Header.Set("X-Request-Id", requestID)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	retry := time.Duration(0)
	if secs, err := strconv.Atoi(res.Header.Get("Retry-After")); err == nil {
		retry = time.Duration(secs) * time.Second
	}
	return httpAnswer{status: res.StatusCode, contentType: res.Header.Get("Content-Type"), body: raw}, retry
}

// perRequestFields are the problem members that name the request rather
// than the answer.
var perRequestFields = regexp.MustCompile(`"(request_id|instance)":"[^"]*",?`)

// sameAnswer reports whether two answers are byte-identical once the
// per-request members are taken out.
func sameAnswer(a, b httpAnswer) bool {
	if a.status != b.status || a.contentType != b.contentType {
		return false
	}
	if bytes.Equal(a.body, b.body) {
		return true
	}
	return bytes.Equal(perRequestFields.ReplaceAll(a.body, nil), perRequestFields.ReplaceAll(b.body, nil))
}
