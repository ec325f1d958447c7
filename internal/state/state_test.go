package state

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type doc struct {
	Open []string `json:"open"`
	N    int      `json:"n"`
}

func TestSaveLoadRoundTripAcrossReopen(t *testing.T) {
	dir := t.TempDir()
	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Save("alerts", doc{Open: []string{"a", "b"}, N: 3}); err != nil {
		t.Fatal(err)
	}
	d2, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got doc
	if err := d2.Load("alerts", &got, time.Unix(100, 0)); err != nil {
		t.Fatal(err)
	}
	if got.N != 3 || len(got.Open) != 2 || got.Open[1] != "b" {
		t.Fatalf("got %+v", got)
	}
	// No temp files are left behind.
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("leftover temp file %s", e.Name())
		}
	}
}

func TestLoadMissingIsEmpty(t *testing.T) {
	d, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	got := doc{N: 7}
	if err := d.Load("nothing", &got, time.Unix(1, 0)); err != nil {
		t.Fatal(err)
	}
	if got.N != 7 {
		t.Fatalf("missing document changed the value: %+v", got)
	}
}

func TestCorruptDocumentIsMovedAsideNotFatal(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "outbox.json"), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got doc
	err = d.Load("outbox", &got, time.Unix(1700000000, 0))
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("want ErrCorrupt, got %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "outbox.json.corrupt-1700000000")); err != nil {
		t.Fatalf("corrupt file not moved aside: %v", err)
	}
	// The next load starts clean and a save works again.
	if err := d.Load("outbox", &got, time.Unix(1700000001, 0)); err != nil {
		t.Fatalf("second load: %v", err)
	}
	if err := d.Save("outbox", doc{N: 1}); err != nil {
		t.Fatal(err)
	}
}

func TestInMemoryDir(t *testing.T) {
	d, err := Open("")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Save("x", doc{N: 2}); err != nil {
		t.Fatal(err)
	}
	var got doc
	if err := d.Load("x", &got, time.Unix(1, 0)); err != nil || got.N != 2 {
		t.Fatalf("got %+v, %v", got, err)
	}
}

func TestRejectsBadNamesAndUnwritableDir(t *testing.T) {
	d, _ := Open(t.TempDir())
	if err := d.Save("../escape", doc{}); err == nil {
		t.Error("path traversal name accepted")
	}
	f := filepath.Join(t.TempDir(), "file")
	os.WriteFile(f, nil, 0o600)
	if _, err := Open(filepath.Join(f, "sub")); err == nil {
		t.Error("a path under a regular file was accepted as state dir")
	}
}
