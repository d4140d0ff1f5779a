package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/rollout"
)

// Model is an open GGUF model with its optional LoRA adapter: the one handle
// that every stage needing a model takes (Rollout, teacherforce.File, Score
// with teacher forcing, Evaluate, Train, Run). The generation engines made
// from it share its weights and follow its adapter; Close frees them all.
//
// A Model may be used by one stage at a time; AdapterPath, SHA256 and
// AdapterSHA256 may be called from any goroutine meanwhile (the server's
// HTTP handlers do, while its loop loads adapters).
type Model struct {
	cfg     ModelConfig
	llm     *llama.Model
	engines []*rollout.Engine

	mu         sync.Mutex // guards what follows
	adapter    *llama.Adapter
	modelSHA   string
	adapterSHA string
}

// currentAdapter is the adapter in use (nil when none).
func (m *Model) currentAdapter() *llama.Adapter {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.adapter
}

// OpenModel loads cfg.Path with llama.cpp (on cfg.Device, cfg.GPULayers
// offloaded) and, when cfg.Adapter is set, the adapter.
func OpenModel(cfg ModelConfig) (*Model, error) { return openModelFor(cfg, false) }

// openModelFor opens a model; for training it keeps quantized weights in the
// file's layout (a repacked weight has no backward product) and warns when a
// Vulkan device computes with F16 products.
func openModelFor(cfg ModelConfig, training bool) (*Model, error) {
	if cfg.Path == "" {
		return nil, ErrNoModel
	}
	llm, err := llama.LoadModel(cfg.Path, llama.ModelParams{GPULayers: cfg.GPULayers, Device: cfg.Device, NoRepack: training})
	if err != nil {
		return nil, err
	}
	m := &Model{cfg: cfg, llm: llm}
	for _, d := range llm.Devices() {
		if d.Backend == "Vulkan" && training && os.Getenv("GGML_VK_DISABLE_F16") == "" {
			// docs/gpu.md, "Precision on Vulkan"
			slog.Warn("training on a Vulkan device with F16 products: gradients agree with the CPU's to a few 1e-3 and log-probs ratios carry F16 rounding; set GGML_VK_DISABLE_F16=1 to compute in F32 (docs/gpu.md)", "device", d.Name)
			break
		}
	}
	if cfg.Adapter != "" {
		if err := m.LoadAdapter(cfg.Adapter); err != nil {
			m.Close()
			return nil, err
		}
	}
	return m, nil
}

// Path is the model file.
func (m *Model) Path() string { return m.cfg.Path }

// AdapterPath is the adapter file in use, "" when none.
func (m *Model) AdapterPath() string {
	if a := m.currentAdapter(); a != nil {
		return a.Path()
	}
	return ""
}

// Architecture is the model's general.architecture ("llama", "qwen2", ...).
func (m *Model) Architecture() string { return m.llm.Architecture() }

// LoadAdapter loads a LoRA adapter and puts it in place of the current one,
// in every engine made so far and in those made later. On an error every
// engine is left with the adapter it had.
func (m *Model) LoadAdapter(path string) error {
	if m.llm == nil {
		return errClosed
	}
	a, err := llama.LoadAdapter(m.llm, path)
	if err != nil {
		return err
	}
	old := m.currentAdapter()
	for k, e := range m.engines {
		if err := e.SetAdapter(a, 1); err != nil {
			// Put the old adapter back on the engines already switched (and
			// on this one, which may hold neither), then free the new one.
			for _, done := range m.engines[:k+1] {
				if rerr := done.SetAdapter(old, 1); rerr != nil {
					err = errors.Join(err, fmt.Errorf("restoring the previous adapter: %w", rerr))
				}
			}
			return errors.Join(err, a.Close())
		}
	}
	m.mu.Lock()
	m.adapter, m.adapterSHA = a, ""
	m.mu.Unlock()
	if old != nil {
		if err := old.Close(); err != nil {
			return fmt.Errorf("freeing the previous adapter: %w", err)
		}
	}
	return nil
}

// SHA256 is the hex SHA-256 of the model file (computed once).
func (m *Model) SHA256() (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.modelSHA == "" {
		h, err := dataset.FileSHA256(m.cfg.Path)
		if err != nil {
			return "", fmt.Errorf("hashing the model: %w", err)
		}
		m.modelSHA = h
	}
	return m.modelSHA, nil
}

// AdapterSHA256 is the hex SHA-256 of the adapter file, "" when none.
func (m *Model) AdapterSHA256() (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.adapter == nil {
		return "", nil
	}
	if m.adapterSHA == "" {
		h, err := dataset.FileSHA256(m.adapter.Path())
		if err != nil {
			return "", fmt.Errorf("hashing the adapter: %w", err)
		}
		m.adapterSHA = h
	}
	return m.adapterSHA, nil
}

var errClosed = errors.New("pipeline: the model is closed")

// engine makes a generation engine with the model's adapter applied. The
// Model closes it.
func (m *Model) engine(o rollout.Options) (*rollout.Engine, error) {
	if m.llm == nil {
		return nil, errClosed
	}
	if o.ChatTemplate == "" {
		o.ChatTemplate = m.cfg.ChatTemplate
	}
	e, err := rollout.NewEngine(m.llm, o)
	if err != nil {
		return nil, err
	}
	if a := m.currentAdapter(); a != nil {
		if err := e.SetAdapter(a, 1); err != nil {
			return nil, errors.Join(err, e.Close())
		}
	}
	m.engines = append(m.engines, e)
	return e, nil
}

// NewEngine makes a generation engine with the model's adapter applied, for
// callers that drive it themselves (confclip serve). The Model closes it,
// or ReleaseEngine before.
func (m *Model) NewEngine(o rollout.Options) (*rollout.Engine, error) { return m.engine(o) }

// ReleaseEngine closes an engine made by NewEngine.
func (m *Model) ReleaseEngine(e *rollout.Engine) { m.release(e) }

// release closes an engine made by engine before the Model closes.
func (m *Model) release(e *rollout.Engine) {
	for i, x := range m.engines {
		if x == e {
			m.engines = append(m.engines[:i], m.engines[i+1:]...)
			break
		}
	}
	_ = e.Close() // an engine's Close frees its context, which never fails
}

// TeacherForcer returns a function that fills the tokens, log-probs and
// entropies of given completions by running them through the model (the
// hook ScoreOptions.TeacherForce takes), with the engine settings of cfg.
func (m *Model) TeacherForcer(cfg Config) (func(context.Context, []*dataset.Rollout) error, error) {
	e, err := m.engine(EngineOptions(cfg))
	if err != nil {
		return nil, err
	}
	return e.TeacherForce, nil
}

// Close frees the engines, the adapter and the model. It is safe to call
// twice.
func (m *Model) Close() error {
	var errs []error
	for _, e := range m.engines {
		errs = append(errs, e.Close())
	}
	m.engines = nil
	m.mu.Lock()
	a := m.adapter
	m.adapter = nil
	m.mu.Unlock()
	if a != nil {
		errs = append(errs, a.Close())
	}
	if m.llm != nil {
		errs = append(errs, m.llm.Close())
		m.llm = nil
	}
	return errors.Join(errs...)
}
