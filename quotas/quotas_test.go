package quotas

import (
	"errors"
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

func TestWithinNamesTheOffendingQuota(t *testing.T) {
	var hi, ok Quotas
	for _, f := range Fields {
		*f.Get(&hi), *f.Get(&ok) = 100, 50
	}
	if err := ok.Within(hi); err != nil {
		t.Fatalf("in bounds: %v", err)
	}
	for _, f := range Fields {
		for _, bad := range []int64{0, -1, 101} {
			q := ok
			*f.Get(&q) = bad
			var be *BoundError
			if err := q.Within(hi); !errors.As(err, &be) || be.Field != f.Name || be.Value != bad || be.Max != 100 {
				t.Errorf("%s=%d: err = %v, want BoundError on that field", f.Name, bad, err)
			}
		}
	}
}
