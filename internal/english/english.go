// Package english writes counts for a reader.
package english

import "fmt"

// Count says n things in English: "1 group", "2 groups", "0 groups".
func Count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
