package notify

import (
	"log/slog"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/redact"
)

// Secret is a credential (bot token, webhook URL, routing key). Every way of
// printing or encoding it yields "<secret>"; only an explicit string
// conversion reveals the value, and only the integration that sends it does
// that.
type Secret string

const redacted = redact.Hidden

// String implements fmt.Stringer.
func (Secret) String() string { return redacted }

// GoString implements fmt.GoStringer (%#v).
func (Secret) GoString() string { return redacted }

// MarshalJSON never encodes the value.
func (Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

// MarshalYAML never encodes the value.
func (Secret) MarshalYAML() (any, error) { return redacted, nil }

// MarshalText never encodes the value (zap, encoding/xml, map keys).
func (Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// LogValue implements slog.LogValuer.
func (Secret) LogValue() slog.Value { return slog.StringValue(redacted) }

// IsSet reports whether a value is configured.
func (s Secret) IsSet() bool { return s != "" }
