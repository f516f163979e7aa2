package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pglease/pglease/internal/sqlerr"
)

// Exit codes. The command's own exit status passes through `pglease run`
// unchanged; these are pglease's own. See the package documentation.
const (
	exitOK       = 0
	exitFailure  = 1   // pglease failed: database error, refused operation, ...
	exitUsage    = 2   // bad flags or arguments, or a connection string that does not parse
	exitLost     = 69  // EX_UNAVAILABLE: the lease or slot was lost; the command was stopped
	exitHeld     = 75  // EX_TEMPFAIL: held elsewhere (--no-wait); the command did not run
	exitNoExec   = 126 // the command could not be executed
	exitNotFound = 127 // the command was not found
	exitSignal   = 128 // + n: killed by signal n (the command, or pglease while waiting)
)

// commands lists the subcommands, in the order help shows them.
var commands = []*command{
	migrateCommand,
	statusCommand,
	runCommand,
	historyCommand,
	tenuresCommand,
	releaseCommand,
	purgeCommand,
	prefixCommand,
	exporterCommand,
	demoCommand,
	versionCommand,
}

// command is one subcommand.
type command struct {
	name    string
	summary string // one line for `pglease help`
	usage   string // synopsis and description for `pglease help NAME`
	// flags declares the flags on fs and returns the function that runs
	// the command with the parsed flags and the remaining arguments.
	flags func(a *app, fs *flag.FlagSet) func(ctx context.Context, args []string) error
	// interspersed lets flags follow positional arguments (all but run,
	// whose arguments after the flags are the command to run).
	interspersed bool
	// signals says that the command handles SIGINT and SIGTERM itself
	// (run forwards them); the others stop on them.
	signals bool
}

// app is one invocation: where it writes and what environment it reads.
type app struct {
	stdout, stderr io.Writer
	getenv         func(string) string
	// secrets are strings never to print (the password of the connection
	// string in use), scrubbed from every error message.
	secrets []string
	// warnedPassword records that the warning about a password in
	// --database was printed.
	warnedPassword bool
}

func main() {
	if code, ok := runReaper(os.Args[1:]); ok {
		os.Exit(code)
	}
	a := &app{stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}
	os.Exit(a.main(os.Args[1:]))
}

// main runs the command line args and returns the exit code.
func (a *app) main(args []string) int {
	global, args, err := globalFlags(args)
	if err != nil {
		return a.report(err)
	}
	if len(args) == 0 {
		a.printUsage(a.stderr)
		return exitUsage
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		return a.help(rest)
	case "-version", "--version":
		name, global = "version", nil
	case "version":
		global = nil // the version of pglease, whatever the database
	}
	cmd := lookup(name)
	if cmd == nil {
		fmt.Fprintf(a.stderr, "pglease: unknown command %q (run 'pglease help' for the list)\n", name)
		return exitUsage
	}
	return a.runCommand(cmd, append(global, rest...))
}

// globalFlags splits off the flags before the command name: --database
// URL, which every command takes (pglease --database URL status), and
// stops at --help or --version. It returns them and the rest of args.
func globalFlags(args []string) (global, rest []string, err error) {
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		name, _, hasValue := strings.Cut(strings.TrimLeft(args[0], "-"), "=")
		switch {
		case name == "h" || name == "help" || name == "version":
			return global, args, nil
		case name == "database" && hasValue:
			global, args = append(global, args[0]), args[1:]
		case name == "database":
			if len(args) < 2 {
				return nil, nil, usagef("", "--database needs a URL: pglease --database URL COMMAND ...")
			}
			global, args = append(global, args[:2]...), args[2:]
		default:
			return nil, nil, usagef("", "%s before the command: only --database URL, --help and --version go there; "+
				"give the other flags after it (pglease COMMAND %s ...)", args[0], args[0])
		}
	}
	return global, args, nil
}

// lookup returns the command called name, or nil.
func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// runCommand parses cmd's flags from args and runs it.
func (a *app) runCommand(cmd *command, args []string) int {
	fs := flag.NewFlagSet("pglease "+cmd.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	run := cmd.flags(a, fs)
	positional, err := parseFlags(fs, args, cmd.interspersed)
	if errors.Is(err, flag.ErrHelp) {
		a.printCommandUsage(a.stdout, cmd, fs)
		return exitOK
	}
	if err != nil {
		return a.report(usagef(cmd.name, "%s", flagError(fs, err)))
	}
	ctx := context.Background()
	if !cmd.signals {
		var stop func()
		ctx, stop = stopOnSignal(ctx)
		defer stop()
	}
	err = run(ctx, positional)
	if sig, ok := errors.AsType[*signalled](context.Cause(ctx)); ok && errors.Is(err, context.Canceled) {
		err = &exitError{code: exitSignal + int(sig.sig), msg: "interrupted by " + signalName(sig.sig)}
	}
	return a.report(err)
}

// signalled is the cause of a context cancelled by a signal.
type signalled struct{ sig syscall.Signal }

func (s *signalled) Error() string { return "got " + signalName(s.sig) }

// stopOnSignal returns a context cancelled, with a *signalled cause, by the
// first SIGINT or SIGTERM. Call stop to stop listening.
func stopOnSignal(parent context.Context) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(parent)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-ch:
			if sig, ok := s.(syscall.Signal); ok {
				cancel(&signalled{sig: sig})
			}
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		close(done)
		cancel(nil)
	}
}

// parseFlags parses args with fs and returns the positional arguments. When
// interspersed is set, flags may also follow positional arguments; "--" ends
// the flags either way.
func parseFlags(fs *flag.FlagSet, args []string, interspersed bool) ([]string, error) {
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if !interspersed {
		return fs.Args(), nil
	}
	var positional []string
	for rest := fs.Args(); len(rest) > 0; rest = fs.Args() {
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		if err := fs.Parse(rest[1:]); err != nil {
			return nil, err
		}
	}
	return positional, nil
}

// shortFlags maps the one-letter flags to the long ones they stand for
// (-v is --verbose): help shows them together.
var shortFlags = map[string]string{"v": "verbose"}

// dashed returns how help and messages spell flag name: -v for a
// one-letter alias, --name for the rest.
func dashed(name string) string {
	if _, ok := shortFlags[name]; ok {
		return "-" + name
	}
	return "--" + name
}

// The errors of package flag, matched to say them the way the help spells
// the flags.
var (
	flagUndefinedRE = regexp.MustCompile(`^flag provided but not defined: -+(.*)$`)
	flagNoValueRE   = regexp.MustCompile(`^flag needs an argument: -+(.*)$`)
	flagBadValueRE  = regexp.MustCompile(`^invalid (?:boolean )?value "(.*)" for (?:flag )?-(\S+): (.*)$`)
)

// flagError rewords an error of fs.Parse: "--ttl 30: a duration needs a
// unit, e.g. 30s" rather than `invalid value "30" for flag -ttl: parse
// error`.
func flagError(fs *flag.FlagSet, err error) string {
	msg := err.Error()
	if m := flagUndefinedRE.FindStringSubmatch(msg); m != nil {
		return "unknown flag " + dashed(m[1])
	}
	if m := flagNoValueRE.FindStringSubmatch(msg); m != nil {
		return dashed(m[1]) + " needs a value"
	}
	m := flagBadValueRE.FindStringSubmatch(msg)
	if m == nil {
		return msg
	}
	value, name, reason := m[1], m[2], m[3]
	shown := value
	if shown == "" || strings.ContainsAny(shown, " \t") {
		shown = strconv.Quote(value)
	}
	if f := fs.Lookup(name); f != nil {
		if g, ok := f.Value.(flag.Getter); ok {
			switch g.Get().(type) {
			case time.Duration:
				if _, err := strconv.ParseFloat(value, 64); err == nil {
					reason = "a duration needs a unit, e.g. " + value + "s"
				} else {
					reason = "not a duration: use a number with a unit, such as 30s, 1m30s or 500ms"
				}
			case int, int64, uint, uint64:
				if reason == "parse error" {
					reason = "not a whole number"
				}
			case bool:
				reason = "want true or false"
				return fmt.Sprintf("%s=%s: %s", dashed(name), shown, reason)
			}
		}
	}
	return fmt.Sprintf("%s %s: %s", dashed(name), shown, reason)
}

// exitError ends pglease with code, after printing "pglease: msg" to
// standard error unless msg is empty.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// usagef returns a usage error of command cmd.
func usagef(cmd, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if cmd != "" {
		msg = fmt.Sprintf("%s: %s (run 'pglease help %s')", cmd, msg, cmd)
	}
	return &exitError{code: exitUsage, msg: msg}
}

// detail returns the text of err, an error of pglease's packages, without
// the "pglease: " it starts with: the command's messages start with it
// already.
func detail(err error) string { return strings.TrimPrefix(err.Error(), sqlerr.Prefix) }

// failf returns a failure with exit code 1.
func failf(format string, args ...any) error {
	return &exitError{code: exitFailure, msg: fmt.Sprintf(format, args...)}
}

// report prints err, if any, and returns its exit code.
func (a *app) report(err error) int {
	if err == nil {
		return exitOK
	}
	code, msg := exitFailure, detail(err)
	if e, ok := errors.AsType[*exitError](err); ok {
		code, msg = e.code, e.msg
	}
	if msg != "" {
		fmt.Fprintf(a.stderr, "pglease: %s\n", a.scrub(oneLine(msg)))
	}
	return code
}

// scrub replaces every secret in s.
func (a *app) scrub(s string) string {
	for _, secret := range a.secrets {
		if secret != "" {
			s = strings.ReplaceAll(s, secret, "xxxxx")
		}
	}
	return s
}

// oneLine joins the lines of s with "; ".
func oneLine(s string) string {
	lines := strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' })
	for i, l := range lines {
		lines[i] = strings.TrimSpace(l)
	}
	return strings.Join(lines, "; ")
}

// help prints the usage of pglease or of one command.
func (a *app) help(args []string) int {
	if len(args) == 0 {
		a.printUsage(a.stdout)
		return exitOK
	}
	cmd := lookup(args[0])
	if cmd == nil {
		fmt.Fprintf(a.stderr, "pglease: unknown command %q (run 'pglease help' for the list)\n", args[0])
		return exitUsage
	}
	fs := flag.NewFlagSet("pglease "+cmd.name, flag.ContinueOnError)
	cmd.flags(a, fs)
	a.printCommandUsage(a.stdout, cmd, fs)
	return exitOK
}

func (a *app) printUsage(w io.Writer) {
	fmt.Fprint(w, `pglease: fenced leases and N-slot claims in PostgreSQL.

Usage:
  pglease [--database URL] <command> [flags] [arguments]
  pglease --version

Commands:
`)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `  help      Show the usage of pglease or of a command

Which database: the first that applies of
  1. --database URL, else PGLEASE_DATABASE_URL, else DATABASE_URL
     (a postgres:// URL or a key=value connection string);
  2. libpq's PG* variables (PGHOST, PGPORT, PGUSER, PGDATABASE, PGSERVICE, ...);
     with none set, every command but demo uses libpq's defaults;
  3. demo only: a server on 127.0.0.1:5432 or the local Unix socket, as user
     postgres, else a throwaway cluster from the local initdb and pg_ctl.
A server named by 1 or 2 is used or the command fails. make test follows
the same rule, steps 3 included, with PGLEASE_TEST_DATABASE_URL in 1 and a
container last; CONTRIBUTING.md#which-database has it whole.

Exit codes: 0 success; 1 failure; 2 usage error (bad flags, or a connection
string that does not parse). pglease run exits with the command's status, or
69 when the lease was lost and the command stopped, 75 when the lease is held
elsewhere (--no-wait), 126/127 when the command cannot be executed or found,
128+n when it died of signal n.

Flags are spelt --name (and -v for run's --verbose); --database may also
come before the command. Run 'pglease help <command>' for the flags of a
command.
`)
}

func (a *app) printCommandUsage(w io.Writer, cmd *command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "%s\n", strings.TrimSpace(cmd.usage))
	var b strings.Builder
	fs.VisitAll(func(f *flag.Flag) {
		if _, ok := shortFlags[f.Name]; ok {
			return // shown with its long form
		}
		name, usage := flag.UnquoteUsage(f)
		b.WriteString("  ")
		for short, long := range shortFlags {
			if long == f.Name {
				fmt.Fprintf(&b, "-%s, ", short)
			}
		}
		fmt.Fprintf(&b, "--%s", f.Name)
		if name != "" {
			fmt.Fprintf(&b, " %s", name)
		}
		fmt.Fprintf(&b, "\n      %s", usage)
		if def := defaultText(f); def != "" && !strings.Contains(usage, "(default") {
			fmt.Fprintf(&b, " (default %s)", def)
		}
		b.WriteString("\n")
	})
	if b.Len() > 0 {
		fmt.Fprintf(w, "\nFlags:\n%s", b.String())
	}
}

// defaultText returns the default of f as help says it: "" for a zero
// value (false, 0, 0s, ""), which means unset, as in package flag's own
// help; durations without trailing zero units (24h, not 24h0m0s).
func defaultText(f *flag.Flag) string {
	switch f.DefValue {
	case "", "false", "0", "0s":
		return ""
	}
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return f.DefValue
	}
	if _, ok := g.Get().(time.Duration); !ok {
		return f.DefValue
	}
	s := f.DefValue // such as 24h0m0s
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
