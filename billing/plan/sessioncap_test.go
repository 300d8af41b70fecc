package plan

import (
	"reflect"
	"strings"
	"testing"
)

// Fields is the one list the API, the nodes and the tests read quotas
// through: it names every Quotas field, in declaration order, by its JSON
// name, and reaches that field.
func TestFieldsListEveryQuota(t *testing.T) {
	typ := reflect.TypeFor[Quotas]()
	if typ.NumField() != len(Fields) {
		t.Fatalf("Quotas has %d fields, Fields lists %d", typ.NumField(), len(Fields))
	}
	for i, f := range Fields {
		sf := typ.Field(i)
		if tag, _, _ := strings.Cut(sf.Tag.Get("json"), ","); tag != f.Name {
			t.Errorf("Fields[%d] is %q, the field %s is %q in JSON", i, f.Name, sf.Name, tag)
		}
		var q Quotas
		*f.Get(&q) = 7
		if reflect.ValueOf(q).Field(i).Int() != 7 {
			t.Errorf("Fields[%d] (%s) does not reach Quotas.%s", i, f.Name, sf.Name)
		}
	}
}

// The session caps fit what nodes enforce: every connection the
// connection quota admits can have a session, and the expiry cap is below
// MQTT's "never" (0xFFFFFFFF), so a capped session does expire.
func TestSessionCapsFitTheProtocol(t *testing.T) {
	for _, name := range Names() {
		p, _ := Lookup(name)
		for _, q := range []Quotas{p.Defaults, p.Max} {
			if q.MaxSessions < q.MaxConnections {
				t.Errorf("%s: max_sessions %d below max_connections %d", name, q.MaxSessions, q.MaxConnections)
			}
			if q.MaxSessionExpiry >= 0xFFFFFFFF {
				t.Errorf("%s: max_session_expiry %d is not below MQTT's never", name, q.MaxSessionExpiry)
			}
		}
	}
}
