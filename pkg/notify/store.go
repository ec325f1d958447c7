package notify

import "time"

// Store keeps small JSON documents across restarts. *state.Dir (wired in
// main) implements it. Load leaves v untouched and returns nil when the
// document does not exist; when the document was unreadable it is moved
// aside and Load returns an error: the caller reports it and starts empty.
type Store interface {
	Load(name string, v any, now time.Time) error
	Save(name string, v any) error
}
