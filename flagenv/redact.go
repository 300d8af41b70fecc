package flagenv

import (
	"net/url"
	"strings"
	"unicode"
)

// Redacted stands for a hidden value in the startup report.
const Redacted = "REDACTED"

// Redact returns v as a log may show it: a URL (scheme://…) keeps only its
// scheme, host and path, its user information shown as REDACTED and every
// secret-looking query parameter's value (password, sslpassword, token,
// secret, key, …) too; a URL that does not parse, or whose '@' is not
// plainly the end of its user information (an unescaped '@', '/', '#' or
// '%' in a password), shows only its scheme. A key=value connection string
// (libpq's "host=db password=…") hides its secret-looking values, and
// wholly when it does not parse. Anything else is returned as it is.
func Redact(v string) string {
	if i := strings.Index(v, "://"); i >= 0 {
		return redactURL(v, v[:i])
	}
	if hasSecretKey(v) {
		return redactDSN(v)
	}
	return v
}

// redactURL hides v's secrets; scheme is what precedes "://".
func redactURL(v, scheme string) string {
	whole := Redacted
	if validScheme(scheme) {
		whole = scheme + "://" + Redacted
	}
	u, err := url.Parse(v)
	if err != nil || u.Opaque != "" {
		return whole
	}
	// An '@' past the authority means the parse may have split a password
	// into host, path, query or fragment.
	authority := v[len(scheme)+len("://"):]
	if i := strings.IndexAny(authority, "/?#"); i >= 0 {
		authority = authority[:i]
	}
	if strings.Count(authority, "@") != strings.Count(v, "@") {
		return whole
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return whole
	}
	for k := range q {
		if secretKey(k) {
			q[k] = []string{Redacted}
		}
	}
	out := u.Scheme + "://"
	if u.User != nil {
		out += Redacted + "@"
	}
	out += u.Host + u.EscapedPath()
	if len(q) > 0 {
		out += "?" + q.Encode()
	}
	return out
}

// redactDSN hides the secret-looking values of a libpq key=value string:
// key = value pairs, a value either a run of non-spaces or single-quoted
// with backslash escapes. One that does not parse is hidden whole.
func redactDSN(v string) string {
	var b strings.Builder
	s := v
	for {
		s = strings.TrimLeftFunc(s, unicode.IsSpace)
		if s == "" {
			return b.String()
		}
		eq := strings.IndexByte(s, '=')
		if eq <= 0 {
			return Redacted
		}
		key := strings.TrimRightFunc(s[:eq], unicode.IsSpace)
		if key == "" || strings.ContainsFunc(key, unicode.IsSpace) {
			return Redacted
		}
		s = strings.TrimLeftFunc(s[eq+1:], unicode.IsSpace)
		var val string
		if strings.HasPrefix(s, "'") {
			end := -1
			for i := 1; i < len(s); i++ {
				if s[i] == '\\' {
					i++
					continue
				}
				if s[i] == '\'' {
					end = i
					break
				}
			}
			if end < 0 {
				return Redacted // an unterminated quote
			}
			val, s = s[:end+1], s[end+1:]
		} else {
			end := strings.IndexFunc(s, unicode.IsSpace)
			if end < 0 {
				end = len(s)
			}
			val, s = s[:end], s[end:]
		}
		if secretKey(key) {
			val = Redacted
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(key + "=" + val)
	}
}

// hasSecretKey tells whether v holds "<secret-looking key>=".
func hasSecretKey(v string) bool {
	for i := strings.IndexByte(v, '='); i >= 0; {
		k := strings.TrimRightFunc(v[:i], unicode.IsSpace)
		if j := strings.LastIndexFunc(k, func(r rune) bool { return unicode.IsSpace(r) || r == '&' || r == '?' || r == ';' }); j >= 0 {
			k = k[j+1:]
		}
		if secretKey(k) {
			return true
		}
		n := strings.IndexByte(v[i+1:], '=')
		if n < 0 {
			break
		}
		i += 1 + n
	}
	return false
}

// secretKey tells whether a parameter named k holds a secret: password,
// sslpassword, passwd, token, access_token, secret, client_secret, key,
// api_key, apikey, …
func secretKey(k string) bool {
	k = strings.ToLower(k)
	for _, s := range []string{"pass", "token", "secret", "key", "auth", "credential"} {
		if strings.Contains(k, s) {
			return true
		}
	}
	return false
}

func validScheme(s string) bool {
	if s == "" || !('a' <= s[0] && s[0] <= 'z' || 'A' <= s[0] && s[0] <= 'Z') {
		return false
	}
	for _, r := range s {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '+' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}
