package notify

import "time"

// Store keeps small JSON documents across restarts: a *persist.Writer over
// the state directory or, in HA, the state ConfigMap (wired in main). Load
// leaves v untouched and returns nil when the document does not exist; when
// the document is corrupt it is moved aside and Load returns an error; when
// it cannot be read (permission, I/O) it is left where it is and Load
// returns an error. Either way a queue reports the error and starts empty:
// paging goes on without the old state.
type Store interface {
	Load(name string, v any, now time.Time) error
	Save(name string, v any) error
}
