package rollout

// SetSeed changes the base seed of the next Generate calls. The run loop
// moves it every step, so that a prompt drawn again in a later step is
// sampled afresh.
func (e *Engine) SetSeed(seed uint64) { e.o.Seed = seed }
