package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/pglease/pglease/internal/pgserver"
	"github.com/pglease/pglease/internal/schema"
)

// exampleDB is the database shared by a package's Example functions.
var exampleDB struct {
	once sync.Once
	name string
	url  string
	err  error
}

// ExampleURL returns the URL of a migrated database for the package's
// runnable Example functions, which get no *testing.T: created on first
// use, shared by the package's examples, and dropped by Main after the run.
// It panics with the harness's explanation when there is no server, which
// fails the example loudly.
func ExampleURL() string {
	e := &exampleDB
	e.once.Do(func() {
		if !mainCalled.Load() {
			e.err = fmt.Errorf("TestMain must call pgtest.Main")
			return
		}
		s, err := discover()
		if err != nil {
			e.err = err
			return
		}
		var b [8]byte
		_, _ = rand.Read(b[:]) // never fails
		e.name = DatabasePrefix + "example_" + hex.EncodeToString(b[:])
		ctx, cancel := context.WithTimeout(context.Background(), dbTimeout)
		defer cancel()
		if e.url, e.err = pgserver.CreateDatabase(ctx, s.URL, e.name); e.err != nil {
			return
		}
		e.err = schema.Up(ctx, e.url)
	})
	if e.err != nil {
		panic(fmt.Sprintf("pgtest: example database: %v", e.err))
	}
	return e.url
}

// MainWithExamples is Main for a package whose Example functions read
// DATABASE_URL, as a service would: before the tests run, it points
// DATABASE_URL at the examples' database (ExampleURL), in this test
// process only.
func MainWithExamples(m *testing.M) {
	mainCalled.Store(true)
	if err := os.Setenv("DATABASE_URL", ExampleURL()); err != nil {
		panic(fmt.Sprintf("pgtest: set DATABASE_URL: %v", err))
	}
	os.Exit(run(m))
}

// dropExampleDatabase drops the examples' database, if one was made.
func dropExampleDatabase() error {
	e := &exampleDB
	if e.name == "" {
		return nil
	}
	s, err := discover()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), dbTimeout)
	defer cancel()
	return pgserver.DropDatabase(ctx, s.URL, e.name)
}
