package pgtest

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/internal/pgserver"
)

// clientURL returns the URL clients of the test database connect with:
// url itself, unless the run goes through a connection pooler
// ([ThroughPooler]), and then the same database and role through this
// process's PgBouncer (started on first use), with pgx's
// default_query_exec_mode=exec. It fails the test when the pooler cannot
// be started.
func clientURL(t testing.TB, url string) string {
	t.Helper()
	if !ThroughPooler(t) {
		return url
	}
	b := bouncer(t)
	out, err := viaBouncer(url, b.port)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return out
}

// viaBouncer returns connString (a postgres:// URL or a keyword/value
// string) with its host and port replaced by 127.0.0.1:port, TLS off (the
// pooler listens on loopback only and offers none) and pgx's
// default_query_exec_mode set to exec, the mode that needs no prepared
// statement to outlive a transaction. Database, role and password are kept.
func viaBouncer(connString string, port int) (string, error) {
	const mode = "exec"
	var out string
	if strings.HasPrefix(connString, "postgres://") || strings.HasPrefix(connString, "postgresql://") {
		u, err := url.Parse(connString)
		if err != nil {
			// A *url.Error repeats the URL, password included.
			if uerr, ok := errors.AsType[*url.Error](err); ok {
				err = uerr.Err
			}
			return "", fmt.Errorf("pooler url: parse %s: %w", pgserver.MaskURL(connString), err)
		}
		u.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		q := u.Query()
		q.Del("host")
		q.Del("port")
		q.Set("sslmode", "disable")
		q.Set("default_query_exec_mode", mode)
		u.RawQuery = q.Encode()
		out = u.String()
	} else {
		// In a keyword/value string a later keyword overrides an earlier one.
		out = fmt.Sprintf("%s host=127.0.0.1 port=%d sslmode=disable default_query_exec_mode=%s",
			strings.TrimSpace(connString), port, mode)
	}
	cfg, err := pgx.ParseConfig(out)
	if err != nil {
		return "", fmt.Errorf("pooler url: %w", err)
	}
	if cfg.Host != "127.0.0.1" || int(cfg.Port) != port || cfg.DefaultQueryExecMode != pgx.QueryExecModeExec || len(cfg.Fallbacks) != 0 {
		return "", fmt.Errorf("pooler url: %s leads to %s:%d in mode %v, want 127.0.0.1:%d in mode %s",
			pgserver.MaskURL(out), cfg.Host, cfg.Port, cfg.DefaultQueryExecMode, port, mode)
	}
	return out, nil
}
