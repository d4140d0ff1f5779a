package rollout

import (
	"slices"
	"testing"
)

func TestValidUTF8(t *testing.T) {
	cases := []struct {
		raw     string
		offsets []int
		text    string
		want    []int
	}{
		{"abc", []int{0, 1, 2}, "abc", []int{0, 1, 2}},
		// ✓ (e2 9c 93) split over two tokens: the offset stays inside it.
		{"a\xe2\x9c\x93b", []int{0, 1, 3, 4}, "a✓b", []int{0, 1, 3, 4}},
		// A character cut off by the length limit.
		{"a\xe2\x9c", []int{0, 1, 2}, "a\uFFFD\uFFFD", []int{0, 1, 4}},
		// A stray continuation byte in the middle.
		{"x\x9cy", []int{0, 1, 2}, "x\uFFFDy", []int{0, 1, 4}},
	}
	for _, c := range cases {
		text, off := validUTF8([]byte(c.raw), c.offsets)
		if text != c.text || !slices.Equal(off, c.want) {
			t.Errorf("%q %v: got %q %v, want %q %v", c.raw, c.offsets, text, off, c.text, c.want)
		}
	}
}

func TestStopCut(t *testing.T) {
	// Pieces "ab", "c\n", "\nd", "", "e": stop "\n\n" begins in the second.
	tb := newTextBuilder([][]byte{[]byte("\n\n"), []byte("zz")})
	var at int
	for i, p := range []string{"ab", "c\n", "\nd"} {
		at = tb.add([]byte(p))
		if (at >= 0) != (i == 2) {
			t.Fatalf("piece %d: stop at %d", i, at)
		}
	}
	if at != 3 {
		t.Fatalf("stop at %d, want 3", at)
	}
	if keep := tb.cutAt(at); keep != 2 || string(tb.raw) != "abc" {
		t.Fatalf("keep %d tokens, text %q; want 2, \"abc\"", keep, tb.raw)
	}
	// A stop string starting exactly at a token keeps that token.
	tb = newTextBuilder([][]byte{[]byte("STOP")})
	tb.add([]byte("ab"))
	tb.add(nil) // an empty piece at offset 2
	tb.add([]byte("ST"))
	at = tb.add([]byte("OP!"))
	if keep := tb.cutAt(at); at != 2 || keep != 3 || string(tb.raw) != "ab" {
		t.Fatalf("stop at %d, keep %d, text %q; want 2, 3, \"ab\"", at, keep, tb.raw)
	}
}
