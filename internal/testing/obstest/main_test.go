package obstest

import (
	"testing"

	"github.com/pglease/pglease/internal/testing/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
