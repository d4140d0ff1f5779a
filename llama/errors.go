package llama

import (
	"fmt"
	"strings"
	"sync"
)

// lastError keeps the most recent ERROR line llama.cpp logged, so that a
// failed call can say why in its Go error.
var lastError struct {
	sync.Mutex
	msg string
}

func recordError(msg string) {
	lastError.Lock()
	lastError.msg = msg
	lastError.Unlock()
}

// takeError returns and clears the last logged llama.cpp error.
func takeError() string {
	lastError.Lock()
	defer lastError.Unlock()
	m := lastError.msg
	lastError.msg = ""
	return m
}

// FileError is a problem with a model, adapter or GGUF file.
type FileError struct {
	Path   string
	Reason string
}

func (e *FileError) Error() string { return fmt.Sprintf("%s: %s", e.Path, e.Reason) }

func fileErr(path, format string, args ...any) error {
	return &FileError{Path: path, Reason: fmt.Sprintf(format, args...)}
}

// withCause appends llama.cpp's own last error message, when it logged one.
func withCause(reason string) string {
	if m := takeError(); m != "" {
		m = strings.TrimPrefix(m, "llama.cpp: ")
		return reason + ": " + m
	}
	return reason
}
