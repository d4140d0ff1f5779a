package verifiers

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func mustNew(t *testing.T, name string, opts Options) Verifier {
	t.Helper()
	v, err := New(name, opts)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

type verdictCase struct {
	name, completion, reference string
	want                        bool
	extracted                   string // checked when non-empty
}

func runVerdicts(t *testing.T, v Verifier, cases []verdictCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, err := v.Verify(context.Background(), c.completion, c.reference)
			if err != nil {
				t.Fatal(err)
			}
			if res.Correct != c.want || (res.Score == 1) != c.want {
				t.Errorf("got %+v, want correct=%v", res, c.want)
			}
			if c.extracted != "" && res.Extracted != c.extracted {
				t.Errorf("extracted %q, want %q", res.Extracted, c.extracted)
			}
			if res.Start >= 0 && c.completion[res.Start:res.End] != res.Extracted {
				t.Errorf("span [%d,%d) is not %q", res.Start, res.End, res.Extracted)
			}
		})
	}
}

func TestExact(t *testing.T) {
	runVerdicts(t, mustNew(t, "exact", Options{}), []verdictCase{
		{"same", "Paris", "Paris", true, "Paris"},
		{"answer is", "I believe the answer is Paris.", "Paris", true, "Paris"},
		{"blanks", "  New   York ", "New York", true, ""},
		{"case matters", "paris", "Paris", false, ""},
		{"punct matters", "Paris!", "Paris", false, ""},
		{"other", "London", "Paris", false, ""},
		{"boxed", `\boxed{42}`, "42", true, "42"},
		{"gsm8k reference", "Answer: 42", "so 42\n#### 42", true, ""},
		{"empty", "   ", "x", false, ""},
	})
	runVerdicts(t, mustNew(t, "exact", Options{CaseFold: true, IgnorePunct: true}), []verdictCase{
		{"fold", "PARIS", "paris", true, ""},
		{"punct", "Paris!!", "paris", true, ""},
		{"hyphen", "well-known", "well known", true, ""},
		{"still different", "Lyon", "Paris", false, ""},
	})
	// The reason says when case decided the verdict.
	for _, c := range []struct {
		fold             bool
		completion, want string
	}{
		{true, "PARIS", "matches the reference, ignoring case"},
		{true, "Paris", "matches the reference"},
		{false, "PARIS", `differs from the reference "Paris" in case only (case_fold is off)`},
		{false, "Lyon", `differs from the reference "Paris"`},
	} {
		r, err := mustNew(t, "exact", Options{CaseFold: c.fold}).Verify(context.Background(), c.completion, "Paris")
		if err != nil || r.Reason != c.want || r.Correct != c.fold && c.completion == "PARIS" {
			t.Errorf("case_fold %v, %q: %+v (%v), want reason %q", c.fold, c.completion, r, err, c.want)
		}
	}
}

func TestChoice(t *testing.T) {
	runVerdicts(t, mustNew(t, "choice", Options{}), []verdictCase{
		{"paren", "I pick (B) because...", "B", true, "B"},
		{"answer is", "The answer is C.", "(C)", true, "C"},
		{"answer is paren lower", "the answer is (c)", "C", true, "c"},
		{"answer colon", "Reasoning...\nAnswer: D", "D", true, "D"},
		{"letter dot text", "B. Paris", "B", true, "B"},
		{"letter paren line", "Considering all:\nA) is wrong\nC) is right", "C", true, "C"},
		{"boxed", `so \boxed{\text{(E)}}`, "E", true, "E"},
		{"bare", " b ", "B", true, "b"},
		{"last wins", "(A) looks good but (B) is right", "B", true, "B"},
		{"answer beats paren", "The answer is A, not (B).", "A", true, "A"},
		{"wrong", "The answer is (A).", "B", false, "A"},
		{"pronoun is no answer", "I think so.", "I", false, ""},
		{"article is no answer", "A dog barked.", "A", false, ""},
		{"reference with text", "(B)", "B. Paris", true, ""},
	})
	if _, err := mustNew(t, "choice", Options{}).Verify(context.Background(), "(A)", "none"); err == nil {
		t.Error("a reference without a letter gave no error")
	}
}

func TestFormat(t *testing.T) {
	tags := mustNew(t, "format", Options{Pattern: `(?s)^<think>.*</think>\s*<answer>(?P<answer>.*)</answer>\s*$`})
	runVerdicts(t, tags, []verdictCase{
		{"tags", "<think>hmm</think>\n<answer>42</answer>", "", true, "42"},
		{"no think", "<answer>42</answer>", "", false, ""},
		{"trailing text", "<think>a</think><answer>1</answer> extra", "", false, ""},
	})
	runVerdicts(t, mustNew(t, "format", Options{JSON: true}), []verdictCase{
		{"object", ` {"a": 1} `, "", true, `{"a": 1}`},
		{"fenced", "```json\n[1, 2]\n```", "", true, "[1, 2]"},
		{"broken", `{"a": 1`, "", false, ""},
		{"prose", "here is json: {}", "", false, ""},
	})
	both := mustNew(t, "format", Options{JSON: true, Pattern: `"answer"`})
	runVerdicts(t, both, []verdictCase{
		{"both", `{"answer": 3}`, "", true, `"answer"`},
		{"json only", `{"result": 3}`, "", false, ""},
	})
	for _, o := range []Options{{}, {Pattern: "("}} {
		if _, err := New("format", o); err == nil {
			t.Errorf("New(format, %+v) accepted", o)
		}
	}
}

func TestCommand(t *testing.T) {
	sh := func(script string) Options {
		return Options{Command: []string{"/bin/sh", "-c", script}, TimeoutMS: 5000}
	}
	for _, tc := range []struct {
		name, script string
		score        float64
		reasonHas    string
	}{
		{"exit 0", "exit 0", 1, "exited 0"},
		{"exit 1", "echo boom >&2; exit 1", 0, "boom"},
		{"stdin and env", `[ "$(cat)" = "$CONFCLIP_REFERENCE" ]`, 1, ""},
		{"score line", "echo checking; echo 0.25", 0.25, "0.25"},
		{"score beats status", "echo 1; exit 3", 1, ""},
		{"out of range", "echo 7; exit 1", 0, "failed"},
		{"fresh dir", `case "$PWD" in */confclip-verify-*) [ -z "$(ls -A)" ];; *) false;; esac`, 1, ""},
		{"cpu limit", "while :; do :; done", 0, "failed"},
		// awk fails on its address-space limit, or the tree's memory watch
		// sees it over 64 MiB first and kills it: either is a verdict of 0
		{"memory limit", `exec awk 'BEGIN{s="x"; while (1) s = s s}'`, 0, "failed|memory limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := sh(tc.script)
			o.CPUSeconds, o.MemoryMB = 1, 64
			// One CPU second can take many wall-clock seconds on a loaded
			// machine: the CPU limit, not the timeout, must end "cpu limit".
			o.TimeoutMS = 60000
			res, err := mustNew(t, "command", o).Verify(context.Background(), "42", "42")
			if err != nil {
				t.Fatal(err)
			}
			if res.Score != tc.score || res.Correct != (tc.score == 1) || !regexp.MustCompile(tc.reasonHas).MatchString(res.Reason) {
				t.Errorf("got %+v, want score %v and a reason matching %q", res, tc.score, tc.reasonHas)
			}
		})
	}

	t.Run("temp dir removed", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "pwd")
		res, err := mustNew(t, "command", sh(`pwd > `+out)).Verify(context.Background(), "", "")
		if err != nil || !res.Correct {
			t.Fatal(res, err)
		}
		dir, _ := os.ReadFile(out)
		if _, err := os.Stat(strings.TrimSpace(string(dir))); !os.IsNotExist(err) {
			t.Errorf("%s still there (%v)", dir, err)
		}
	})

	t.Run("timeout kills the group", func(t *testing.T) {
		pidFile := filepath.Join(t.TempDir(), "pid")
		o := sh(`sleep 60 & echo $! > ` + pidFile + `; wait`)
		o.TimeoutMS = 300
		start := time.Now()
		res, err := mustNew(t, "command", o).Verify(context.Background(), "", "")
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("took %v", d)
		}
		if res.Score != 0 || !strings.HasPrefix(res.Reason, "timeout after") {
			t.Errorf("got %+v", res)
		}
		b, err := os.ReadFile(pidFile)
		if err != nil {
			t.Fatal(err)
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		// The grandchild "sleep" must be gone (a zombie reaped by init at worst).
		deadline := time.Now().Add(2 * time.Second)
		for syscall.Kill(pid, 0) == nil && !isZombie(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("sleep (pid %d) survived the timeout", pid)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})

	t.Run("caller cancel is an error", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		if _, err := mustNew(t, "command", sh("sleep 10")).Verify(ctx, "", ""); err == nil {
			t.Error("no error when the caller's context ended")
		}
	})

	for _, argv := range [][]string{nil, {"/nonexistent/checker"}} {
		if _, err := New("command", Options{Command: argv}); err == nil {
			t.Errorf("command %q accepted", argv)
		}
	}
}

// isZombie reports whether pid has exited but is not yet reaped.
func isZombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) > 0 && f[0] == "Z"
}

func TestCombine(t *testing.T) {
	m := mustNew(t, "math", Options{})
	f := mustNew(t, "format", Options{Pattern: `\\boxed\{`})
	c, err := Combine(Weighted{m, 3}, Weighted{f, 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		completion string
		score      float64
		correct    bool
	}{
		{`\boxed{4}`, 1, true},
		{`\boxed{5}`, 0.25, false},
		{`Answer: 4`, 0.75, true},
	} {
		res, err := c.Verify(context.Background(), tc.completion, "4")
		if err != nil {
			t.Fatal(err)
		}
		if res.Score != tc.score || res.Correct != tc.correct {
			t.Errorf("%q: got %+v, want score %v correct %v", tc.completion, res, tc.score, tc.correct)
		}
	}
	if res, _ := c.Verify(context.Background(), `\boxed{4}`, "4"); res.Extracted != "4" || res.Start != 7 {
		t.Errorf("span is not the primary's: %+v", res)
	}
	for _, bad := range [][]Weighted{nil, {{m, -1}}, {{m, 0}}, {{nil, 1}}} {
		if _, err := Combine(bad...); err == nil {
			t.Errorf("Combine(%v) accepted", bad)
		}
	}
}

func TestRegistry(t *testing.T) {
	want := []string{"choice", "command", "exact", "format", "math"}
	if got := strings.Join(Names(), ","); got != strings.Join(want, ",") {
		t.Errorf("Names() = %v, want %v", got, want)
	}
	if _, err := New("nope", Options{}); err == nil {
		t.Error("unknown name accepted")
	}
}

func TestGuard(t *testing.T) {
	panicky := func(context.Context, string, string) (Result, error) { panic("boom") }
	if _, err := guarded(context.Background(), Options{}.withDefaults(), "", "", panicky); err == nil {
		t.Error("panic not turned into an error")
	}
	slow := func(ctx context.Context, _, _ string) (Result, error) { <-ctx.Done(); return noAnswer(""), ctx.Err() }
	res, err := guarded(context.Background(), Options{TimeoutMS: 10}.withDefaults(), "", "", slow)
	if err != nil || !strings.HasPrefix(res.Reason, "timeout after 10ms") {
		t.Errorf("timeout: %+v %v", res, err)
	}
	long := strings.Repeat("é", 100)
	capped := func(_ context.Context, c, _ string) (Result, error) {
		return Result{Score: 7, Start: 0, End: len(c), Extracted: c}, nil
	}
	res, _ = guarded(context.Background(), Options{MaxBytes: 51}.withDefaults(), long, "", capped)
	if res.End != 50 || res.Score != 1 {
		t.Errorf("cap/clamp: end %d score %v", res.End, res.Score)
	}
}
