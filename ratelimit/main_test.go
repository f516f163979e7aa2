package ratelimit_test

import (
	"testing"

	"github.com/pglease/pglease/internal/testing/pgtest"
)

// TestMain points DATABASE_URL at a migrated database for the examples.
func TestMain(m *testing.M) { pgtest.MainWithExamples(m) }
