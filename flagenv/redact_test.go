package flagenv

import (
	"strings"
	"testing"
)

// TestRedact: no password, token or key of a URL or connection string
// reaches the log, however malformed the value; what is not secret stays
// readable.
func TestRedact(t *testing.T) {
	for _, c := range []struct {
		name, in, want string
		secrets        []string // must not appear in the output
	}{
		{"plain value", ":8080", ":8080", nil},
		{"url without secrets", "postgres://db:5432/berth?sslmode=require", "postgres://db:5432/berth?sslmode=require", nil},
		{"password in user information", "postgres://berth:pa55word@db:5432/berth", "postgres://REDACTED@db:5432/berth", []string{"pa55word", "berth@"}},
		{"token as the user", "https://ghp_t0ken@example.com/x", "https://REDACTED@example.com/x", []string{"ghp_t0ken"}},
		{"redis password only", "redis://:s3cret@127.0.0.1:6379/2", "redis://REDACTED@127.0.0.1:6379/2", []string{"s3cret"}},
		{"password in the query", "postgres://db/berth?password=hunter2&sslmode=verify-full", "postgres://db/berth?password=REDACTED&sslmode=verify-full", []string{"hunter2"}},
		{"sslpassword and token", "postgres://db/b?sslpassword=k3y&token=t0k&secret=s3c&api_key=a9", "postgres://db/b?api_key=REDACTED&secret=REDACTED&sslpassword=REDACTED&token=REDACTED", []string{"k3y", "t0k", "s3c", "a9"}},
		{"'%' in the password: no parse", "postgres://berth:pa%zzword@db/berth", "postgres://REDACTED", []string{"pa%zzword", "db"}},
		{"'#' in the password", "postgres://berth:12#34@db/berth", "postgres://REDACTED", []string{"12#34", "34@"}},
		{"'/' in the password", "postgres://berth:1234/ss@db/berth", "postgres://REDACTED", []string{"1234", "ss@"}},
		{"'@' in the password", "postgres://berth:p@ss@db/berth", "postgres://REDACTED@db/berth", []string{"p@ss", "berth:p"}},
		{"'@' in a query password", "postgres://db/berth?password=a@b", "postgres://REDACTED", []string{"a@b"}},
		{"bad query escape", "postgres://db/berth?password=%zz1", "postgres://REDACTED", []string{"zz1"}},
		{"no scheme to trust", "://user:pw@x", "REDACTED", []string{"pw"}},
		{"fragment dropped", "redis://db:6379/0#frag", "redis://db:6379/0", []string{"frag"}},
		{"key=value dsn", "host=db port=5432 user=berth password=hunter2 dbname=berth", "host=db port=5432 user=berth password=REDACTED dbname=berth", []string{"hunter2"}},
		{"quoted dsn value", `host=db password='hun ter\'2' sslmode=require`, "host=db password=REDACTED sslmode=require", []string{"hun", "ter"}},
		{"spaces around '='", "host = db password = hunter2", "host=db password=REDACTED", []string{"hunter2"}},
		{"unterminated quote", "host=db password='hunter2", "REDACTED", []string{"hunter2"}},
		{"dsn without a secret", "host=db dbname=berth", "host=db dbname=berth", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Redact(c.in)
			if got != c.want {
				t.Errorf("Redact(%q) = %q, want %q", c.in, got, c.want)
			}
			for _, s := range c.secrets {
				if strings.Contains(got, s) {
					t.Errorf("Redact(%q) = %q shows %q", c.in, got, s)
				}
			}
		})
	}
}

// TestMalformedURLNotInError: a value a flag refuses is quoted in the
// error only as the log may show it.
func TestMalformedURLNotInError(t *testing.T) {
	_, _, err := apply(t, nil, map[string]string{"BERTH_MAX_QUEUED": "postgres://u:hunter2@db/x"})
	if err == nil || !strings.Contains(err.Error(), "BERTH_MAX_QUEUED") || strings.Contains(err.Error(), `"postgres://u:hunter2`) {
		t.Fatalf("error %v: want the variable named and the URL redacted in the quote", err)
	}
}
