package httpapi

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"berth.dev/services/internal/store"
)

// maxBody bounds every request body.
const maxBody = 1 << 20

// decodeJSON reads exactly one JSON object into dst, refusing unknown
// fields, trailing data and bodies over maxBody.
func decodeJSON(w http.ResponseWriter, r *http.Request, dst any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return errUnsupportedMedia
		}
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxBody)
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return jsonError(err, dst)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return err
		}
		return &malformedError{detail: "the body must hold a single JSON value"}
	}
	return nil
}

// jsonError turns encoding/json's errors, decoding into dst, into the
// API's: in words for users, naming the field and what it takes.
func jsonError(err error, dst any) error {
	var (
		syntax  *json.SyntaxError
		typeErr *json.UnmarshalTypeError
		tooBig  *http.MaxBytesError
	)
	switch {
	case errors.As(err, &tooBig):
		return err
	case errors.Is(err, io.EOF):
		return &malformedError{detail: "the body is empty; send a JSON object"}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &malformedError{detail: "the JSON body ends early"}
	case errors.As(err, &syntax):
		return &malformedError{detail: fmt.Sprintf("invalid JSON at byte %d: %v", syntax.Offset, syntax)}
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			return &malformedError{detail: fmt.Sprintf("the body must be a JSON object, not %s", typeErr.Value)}
		}
		return invalid(field, fmt.Sprintf("must be %s, not %s", jsonKind(typeErr.Type.Kind().String()), typeErr.Value))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name, _ := strconv.Unquote(strings.TrimPrefix(err.Error(), "json: unknown field "))
		return invalid(name, "unknown field; the body takes "+strings.Join(bodyFields(reflect.TypeOf(dst), ""), ", "))
	}
	return &malformedError{detail: "the body is not the JSON this operation takes; /v1/openapi.json describes it"}
}

// bodyFields lists the JSON fields of the struct t points to, a nested
// object's as parent.field.
func bodyFields(t reflect.Type, prefix string) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && name == "" {
			out = append(out, bodyFields(ft, prefix)...)
			continue
		}
		if name == "" {
			name = f.Name
		}
		if ft.Kind() == reflect.Struct && ft != reflect.TypeFor[time.Time]() {
			if sub := bodyFields(ft, prefix+name+"."); len(sub) > 0 {
				out = append(out, sub...)
				continue
			}
		}
		out = append(out, prefix+name)
	}
	return out
}

func jsonKind(k string) string {
	switch k {
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "slice", "array":
		return "an array"
	case "struct", "map":
		return "an object"
	case "ptr":
		return "a value of the documented type"
	}
	return "a number"
}

// Pagination bounds of the lists keyed by (created_at, id). A list keyed
// by an id alone (sessions, by client id) has a pageKind of its own.
const (
	defaultLimit = 50
	maxLimit     = 200
)

// pageKind describes how a list pages.
type pageKind struct {
	def, max int
	byID     bool // the cursor holds only an id, no time
}

var pageByTime = pageKind{def: defaultLimit, max: maxLimit}

// cursorJSON is a cursor's hidden form.
type cursorJSON struct {
	T time.Time `json:"t,omitzero"`
	I string    `json:"i"`
}

func encodeCursor(c *store.Cursor) *string {
	if c == nil {
		return nil
	}
	b, _ := json.Marshal(cursorJSON{T: c.At, I: c.ID})
	s := base64.RawURLEncoding.EncodeToString(b)
	return &s
}

// parsePage reads ?limit= and ?cursor= of a list keyed by (created_at, id).
func parsePage(r *http.Request) (store.Page, error) { return parsePageOf(r, pageByTime) }

// parsePageOf reads ?limit= and ?cursor= of a list that pages like k.
func parsePageOf(r *http.Request, k pageKind) (store.Page, error) {
	q := r.URL.Query()
	p := store.Page{Limit: k.def}
	var v validator
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		v.check(err == nil && n >= 1 && n <= k.max, "limit", fmt.Sprintf("must be an integer from 1 to %d", k.max))
		p.Limit = n
	}
	if s := q.Get("cursor"); s != "" {
		var c cursorJSON
		b, err := base64.RawURLEncoding.DecodeString(s)
		if err == nil {
			err = json.Unmarshal(b, &c)
		}
		if err != nil || c.I == "" || c.T.IsZero() != k.byID {
			v.add("cursor", "is not a cursor this API returned")
		} else {
			p.After = &store.Cursor{At: c.T, ID: c.I}
		}
	}
	return p, v.err()
}

// list is a page of a list answer.
type list[T any] struct {
	Items      []T     `json:"items"`
	NextCursor *string `json:"next_cursor"`
}

func newList[T any](items []T, next *store.Cursor) list[T] {
	if items == nil {
		items = []T{}
	}
	return list[T]{Items: items, NextCursor: encodeCursor(next)}
}
