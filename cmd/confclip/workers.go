package main

import (
	"os"

	"github.com/confclip/confclip/server"
)

// workerPool is run's rollout workers ([rollout] endpoints, --endpoint):
// OPENAI_API_KEY, when set, is sent to them as a bearer token; the pool's
// notes (a worker down, a group retried) go to standard error.
func workerPool(endpoints []string) *server.Pool {
	p := server.NewPool(endpoints, server.Client{APIKey: os.Getenv("OPENAI_API_KEY")})
	p.Log = os.Stderr
	return p
}
