package state

import (
	"errors"
	"io/fs"
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

// A document that exists but cannot be read is an error for the caller,
// not corruption: it stays where it is, so that a later start (after the
// permission or disk is fixed) still finds it.
func TestUnreadableDocumentIsAnErrorAndLeftInPlace(t *testing.T) {
	t.Run("path is a directory", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Mkdir(filepath.Join(dir, "outbox.json"), 0o700); err != nil {
			t.Fatal(err)
		}
		d, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		got := doc{N: 7}
		err = d.Load("outbox", &got, time.Unix(1700000000, 0))
		if err == nil {
			t.Fatal("Load of an unreadable document returned nil")
		}
		if errors.Is(err, ErrCorrupt) {
			t.Fatalf("unreadable document reported as corrupt: %v", err)
		}
		if got.N != 7 {
			t.Errorf("v changed: %+v", got)
		}
		if fi, err := os.Stat(filepath.Join(dir, "outbox.json")); err != nil || !fi.IsDir() {
			t.Errorf("unreadable document was moved: %v", err)
		}
		if matches, _ := filepath.Glob(filepath.Join(dir, "*.corrupt-*")); len(matches) != 0 {
			t.Errorf("moved aside as corrupt: %v", matches)
		}
	})
	t.Run("permission denied", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "outbox.json")
		if err := os.WriteFile(path, []byte(`{"n":3}`), 0o600); err != nil {
			t.Fatal(err)
		}
		d, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		// Tests run as root, which no file mode stops: fail the read the
		// way the kernel does for anyone else.
		d.readFile = func(name string) ([]byte, error) {
			return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrPermission}
		}
		var got doc
		err = d.Load("outbox", &got, time.Unix(1700000000, 0))
		if !errors.Is(err, fs.ErrPermission) {
			t.Fatalf("want an error wrapping fs.ErrPermission, got %v", err)
		}
		if errors.Is(err, ErrCorrupt) {
			t.Fatalf("permission error reported as corrupt: %v", err)
		}
		if b, err := os.ReadFile(path); err != nil || string(b) != `{"n":3}` {
			t.Errorf("document touched: %q, %v", b, err)
		}
		// Once readable again, the same document loads.
		d.readFile = os.ReadFile
		if err := d.Load("outbox", &got, time.Unix(1700000001, 0)); err != nil || got.N != 3 {
			t.Errorf("after the fix: %+v, %v", got, err)
		}
	})
}
