package pgserver

import (
	"net/url"
	"regexp"
	"strings"
)

// mask replaces every password shown by MaskURL.
const mask = "xxxxx"

// dsnPassword matches a password=value pair of a keyword/value connection
// string, with the value bare or single-quoted (backslash escapes allowed).
var dsnPassword = regexp.MustCompile(`(?i)(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'?|\S+)`)

// MaskURL returns connString with any password replaced by "xxxxx", so that it
// can be printed. It handles postgres:// and postgresql:// URLs (the password
// in the user information and a password query parameter) and keyword/value
// connection strings (password=...). A string it cannot parse is masked
// generously rather than returned as it is.
func MaskURL(connString string) string {
	if !isURL(connString) {
		return dsnPassword.ReplaceAllString(connString, "${1}"+mask)
	}
	u, err := url.Parse(connString)
	if err != nil {
		return maskUnparsedURL(connString)
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), mask)
	}
	if q := u.Query(); q.Has("password") {
		q.Set("password", mask)
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// maskUnparsedURL masks everything between the user name and the last '@' of
// a URL that net/url rejects.
func maskUnparsedURL(s string) string {
	scheme, rest, _ := strings.Cut(s, "://")
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return dsnPassword.ReplaceAllString(s, "${1}"+mask)
	}
	user, _, hasPassword := strings.Cut(rest[:at], ":")
	if !hasPassword {
		return scheme + "://" + user + "@" + dsnPassword.ReplaceAllString(rest[at+1:], "${1}"+mask)
	}
	return scheme + "://" + user + ":" + mask + "@" + dsnPassword.ReplaceAllString(rest[at+1:], "${1}"+mask)
}

// isURL reports whether connString is in URL form rather than keyword/value
// form, the way pgconn.ParseConfig decides.
func isURL(connString string) bool {
	return strings.HasPrefix(connString, "postgres://") || strings.HasPrefix(connString, "postgresql://")
}
