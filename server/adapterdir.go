package server

import (
	"fmt"
	"path/filepath"
)

// resolveInDir is the file that name inside dir is, with every symlink
// followed, and an error when that file is outside dir: a link in the
// adapter folder must not load a file from elsewhere. The resolved path is
// what gets loaded, so the check and the load see the same file.
func resolveInDir(dir, name string) (string, error) {
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", err
	}
	path, err := filepath.EvalSymlinks(filepath.Join(root, name))
	if err != nil {
		return "", err
	}
	if rel, err := filepath.Rel(root, path); err != nil || !filepath.IsLocal(rel) {
		return "", fmt.Errorf("resolves to %s, outside the adapter folder", path)
	}
	return path, nil
}
