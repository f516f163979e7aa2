package tenure

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// noDB fails every query: the timer logic under test makes none.
type noDB struct{}

var errNoDB = errors.New("noDB: no query expected")

func (noDB) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, errNoDB
}
func (noDB) Query(context.Context, string, ...any) (pgx.Rows, error) { return nil, errNoDB }
func (noDB) QueryRow(context.Context, string, ...any) pgx.Row        { return errRow{} }

type errRow struct{}

func (errRow) Scan(...any) error { return errNoDB }

// TestDoneAtDeadline: Done closes exactly at the local deadline, the
// request's send time plus the TTL minus the safety margin (a tenth of the
// TTL by default), on the bubble's fake clock.
func TestDoneAtDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, err := New(noDB{}, Kind{Noun: "lease", Prefix: "pglease", Lost: ErrLeaseLost}, Config{})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		tn := c.Grant("x", 0, 1, time.Second, start)
		if want := start.Add(900 * time.Millisecond); !tn.Deadline().Equal(want) {
			t.Fatalf("Deadline %s after the send, want 900ms", tn.Deadline().Sub(start))
		}
		<-tn.Done()
		if got := time.Since(start); got != 900*time.Millisecond {
			t.Fatalf("Done closed %s after the send, want at the deadline (900ms)", got)
		}
	})
}

// TestConfigRefused: New refuses invalid settings, naming the field.
func TestConfigRefused(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Holder: "a\x00b"}, "Holder must not contain NUL"},
		{Config{SafetyMargin: -1}, "SafetyMargin must not be negative"},
		{Config{RenewInterval: time.Second, RetryDelay: 2 * time.Second}, "RetryDelay 2s must be shorter than RenewInterval 1s"},
	} {
		_, err := New(noDB{}, Kind{}, tc.cfg)
		if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want ErrInvalidArgument saying %q", tc.cfg, err, tc.want)
		}
	}
	if _, err := New(nil, Kind{}, Config{}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("New(nil) = %v, want ErrInvalidArgument", err)
	}
}

// TestInterpretSaysPrefixOnce: the sentinels and the SQL's own messages
// start with "pglease: "; the mapped error says it once, and errors.As
// still finds the server's error.
func TestInterpretSaysPrefixOnce(t *testing.T) {
	ctx := context.Background()
	pgErr := func(code, msg string) *pgconn.PgError {
		return &pgconn.PgError{Severity: "ERROR", Code: code, Message: msg}
	}
	for _, tc := range []struct {
		prefix string
		err    error
		is     error
		want   string
	}{
		{"pglease", pgErr("PGL01", "pglease: lease 'x' is not held with fence 3: current fence is 4"), ErrLeaseLost,
			"pglease: lease lost: the tenure is over: lease 'x' is not held with fence 3: current fence is 4 (SQLSTATE PGL01)"},
		{"pglease", pgErr("22023", "pglease.acquire: p_ttl must be more than 0 and at most 24 hours, got 00:00:00"), ErrInvalidArgument,
			"pglease: invalid argument: ERROR: pglease.acquire: p_ttl must be more than 0 and at most 24 hours, got 00:00:00 (SQLSTATE 22023)"},
		{"runslots", pgErr("42883", "function pglease.claim_slot(unknown) does not exist"), ErrNotMigrated,
			ErrNotMigrated.Error() + ": ERROR: function pglease.claim_slot(unknown) does not exist (SQLSTATE 42883)"},
		{"pglease", pgErr("42501", "permission denied for function acquire"), ErrPermissionDenied,
			ErrPermissionDenied.Error() + ": ERROR: permission denied for function acquire (SQLSTATE 42501)"},
		{"pglease", pgErr("PGL03", "pglease: ended meanwhile"), nil, "pglease: ended meanwhile (SQLSTATE PGL03)"},
		{"runslots", pgErr("PGL03", "pglease: ended meanwhile"), nil, "runslots: ended meanwhile (SQLSTATE PGL03)"},
		{"pglease", errNoDB, nil, "pglease: noDB: no query expected"},
	} {
		got := Interpret(ctx, tc.prefix, ErrLeaseLost, tc.err)
		if got.Error() != tc.want {
			t.Errorf("Interpret(%q, %v):\n got %q\nwant %q", tc.prefix, tc.err, got, tc.want)
		}
		if n := strings.Count(got.Error(), "pglease:"); n > 1 {
			t.Errorf("Interpret(%q, %v) says %q %d times: %q", tc.prefix, tc.err, "pglease:", n, got)
		}
		if tc.is != nil && !errors.Is(got, tc.is) {
			t.Errorf("Interpret(%q, %v) = %v, want it to match %v", tc.prefix, tc.err, got, tc.is)
		}
		if want, ok := errors.AsType[*pgconn.PgError](tc.err); ok {
			if back, ok := errors.AsType[*pgconn.PgError](got); !ok || back != want {
				t.Errorf("Interpret(%q, %v): errors.As finds %v, want the server's error", tc.prefix, tc.err, back)
			}
		}
	}
}

// TestCheckText: a name, holder or scope is refused before a round trip
// when the SQL would refuse it, or when Postgres text cannot hold it.
func TestCheckText(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  string // "": accepted
	}{
		{"jobs", ""},
		{"ß日本🔒 ;'\"", ""},
		{strings.Repeat("x", MaxNameLen), ""},
		{"", "1 to 256 bytes"},
		{strings.Repeat("x", MaxNameLen+1), "1 to 256 bytes"},
		{"a\xffb", "valid UTF-8"},
		{"a\x00b", "NUL"},
	} {
		err := CheckText("name", tc.value)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("CheckText(%q) = %v, want nil", tc.value, err)
		case tc.want != "" && (!errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("CheckText(%q) = %v, want ErrInvalidArgument saying %q", tc.value, err, tc.want)
		}
	}
}
