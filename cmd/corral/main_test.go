package main

import (
	"testing"

	"github.com/corralhq/corral/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
