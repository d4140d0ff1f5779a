package dataset

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// FileSHA256 returns the hex SHA-256 of a file, read as a stream so that a
// model of many gigabytes never sits in memory.
func FileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// ConfigHash returns the hex SHA-256 of a JSON document in canonical form:
// decoded and encoded again, which sorts object keys and drops spaces.
// Numbers keep their text (json.Number), so no precision is lost on the way.
func ConfigHash(configJSON []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(configJSON))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", fmt.Errorf("config JSON: %w", err)
	}
	canon, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("config JSON: %w", err)
	}
	h := sha256.Sum256(canon)
	return hex.EncodeToString(h[:]), nil
}
