// Package state keeps small JSON documents in a directory so that the
// watchdog survives restarts: alert records, notification delivery state,
// the undelivered outbox. Writes are atomic (temp file, fsync, rename, fsync
// of the directory), so a crash leaves either the old or the new document.
// A document that cannot be decoded is moved aside, reported, and treated as
// absent: corrupt state must never stop the daemon from paging. A document
// that cannot be read at all (permission, I/O) is left where it is and the
// error returned: it may be intact, and the next start may read it.
package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"time"
)

// ErrCorrupt is wrapped by Load when a document was unreadable and has been
// moved aside. The caller starts from empty state and reports the error.
var ErrCorrupt = errors.New("state document corrupt, moved aside")

var validName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]*$`)

// Dir is a directory of JSON documents. The zero value is unusable; use Open.
// An empty path gives an in-memory Dir (nothing persisted), used when no
// state directory is configured.
type Dir struct {
	path string
	mu   sync.Mutex
	mem  map[string][]byte
	// readFile is os.ReadFile; tests replace it to fail the way a root
	// process cannot be made to fail (permission denied, EIO).
	readFile func(name string) ([]byte, error)
}

// Open prepares the directory (creating it) and returns a Dir for it.
func Open(path string) (*Dir, error) {
	if path == "" {
		return &Dir{mem: map[string][]byte{}}, nil
	}
	if err := os.MkdirAll(path, 0o700); err != nil {
		return nil, fmt.Errorf("state dir %q: %w", path, err)
	}
	probe, err := os.CreateTemp(path, ".probe-*")
	if err != nil {
		return nil, fmt.Errorf("state dir %q is not writable: %w", path, err)
	}
	probe.Close()
	os.Remove(probe.Name())
	return &Dir{path: path, readFile: os.ReadFile}, nil
}

// Path is the directory, "" for an in-memory Dir.
func (d *Dir) Path() string { return d.path }

// Load decodes document name into v. A missing document leaves v untouched
// and returns nil. An undecodable one is renamed to name.corrupt-<unix> and
// Load returns an error wrapping ErrCorrupt; v is left untouched. One that
// cannot be read is not touched: Load returns the read error (errors.Is
// finds fs.ErrPermission and the like in it), not ErrCorrupt.
func (d *Dir) Load(name string, v any, now time.Time) error {
	if !validName.MatchString(name) {
		return fmt.Errorf("state document name %q is invalid", name)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var data []byte
	if d.path == "" {
		b, ok := d.mem[name]
		if !ok {
			return nil
		}
		data = b
	} else {
		b, err := d.readFile(filepath.Join(d.path, name+".json"))
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("state %s: read: %w", name, err)
		}
		data = b
	}
	if err := json.Unmarshal(data, v); err != nil {
		return d.moveAside(name, now, err)
	}
	return nil
}

func (d *Dir) moveAside(name string, now time.Time, cause error) error {
	if d.path == "" {
		delete(d.mem, name)
		return fmt.Errorf("state %s: %w: %v", name, ErrCorrupt, cause)
	}
	src := filepath.Join(d.path, name+".json")
	dst := fmt.Sprintf("%s.corrupt-%d", src, now.Unix())
	if err := os.Rename(src, dst); err != nil {
		return fmt.Errorf("state %s: %w (could not move aside: %v): %v", name, ErrCorrupt, err, cause)
	}
	return fmt.Errorf("state %s: %w to %s: %v", name, ErrCorrupt, filepath.Base(dst), cause)
}

// Save encodes v and atomically replaces document name.
func (d *Dir) Save(name string, v any) error {
	if !validName.MatchString(name) {
		return fmt.Errorf("state document name %q is invalid", name)
	}
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("state %s: encode: %w", name, err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.path == "" {
		d.mem[name] = data
		return nil
	}
	tmp, err := os.CreateTemp(d.path, "."+name+".tmp-*")
	if err != nil {
		return fmt.Errorf("state %s: %w", name, err)
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("state %s: write: %w", name, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("state %s: sync: %w", name, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("state %s: close: %w", name, err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(d.path, name+".json")); err != nil {
		return fmt.Errorf("state %s: rename: %w", name, err)
	}
	if dir, err := os.Open(d.path); err == nil {
		dir.Sync() // make the rename durable; best effort on filesystems that refuse
		dir.Close()
	}
	return nil
}
