package app

import (
	"fmt"
	"io"
	"strings"

	zaplogfmt "github.com/jsternberg/zap-logfmt"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/sglang-watchdog/sglang-watchdog/internal/config"
)

// NewLogger writes one record per line to w in format (config.LogFormats).
func NewLogger(level, format string, w io.Writer) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, err
	}
	encCfg := zap.NewProductionEncoderConfig()
	encCfg.TimeKey, encCfg.EncodeTime = "ts", zapcore.ISO8601TimeEncoder
	var enc zapcore.Encoder
	switch format {
	case config.LogFormatJSON:
		enc = zapcore.NewJSONEncoder(encCfg)
	case config.LogFormatLogfmt:
		enc = zaplogfmt.NewEncoder(encCfg)
	case config.LogFormatConsole:
		encCfg.EncodeLevel = zapcore.CapitalLevelEncoder
		encCfg.EncodeTime = zapcore.TimeEncoderOfLayout("15:04:05")
		enc = zapcore.NewConsoleEncoder(encCfg)
	default:
		return nil, fmt.Errorf("log format %q is not one of %s", format, strings.Join(config.LogFormats, ", "))
	}
	return zap.New(zapcore.NewCore(enc, zapcore.AddSync(w), lvl)), nil
}
