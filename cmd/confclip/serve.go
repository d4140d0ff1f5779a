package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/confclip/confclip/pipeline"
	"github.com/confclip/confclip/server"
)

func init() {
	register(func() *cli.Command {
		return &cli.Command{
			Name:      "serve",
			Usage:     "serve the model over an OpenAI-compatible HTTP API (completions, chat completions with log-probs and streaming)",
			UsageText: "confclip serve -m M.gguf [--host 127.0.0.1] [--port 8080] [--parallel 16] [--ctx-size 2048] [--adapter-dir DIR]",
			Description: "Endpoints: POST /v1/completions, POST /v1/chat/completions (stream: true for server-sent\n" +
				"events), GET /v1/models, GET /health, POST /v1/adapters {\"path\": \"name.gguf\"} (with\n" +
				"--adapter-dir). Requests are batched continuously across clients. The sampling flags are the\n" +
				"defaults of requests that do not set them. SIGINT or SIGTERM stops taking requests and\n" +
				"finishes those in flight (see docs/scale.md).",
			Flags: join(modelFlags(), samplingFlags(), []cli.Flag{
				&cli.StringFlag{Name: "host", Value: "127.0.0.1", Usage: "address to listen on (0.0.0.0 for every interface)"},
				&cli.IntFlag{Name: "port", Value: 8080, Usage: "TCP port (0 picks a free one, printed)"},
				&cli.StringFlag{Name: "model-id", Usage: "the model's name in the API (default: the file's name without .gguf)"},
				&cli.StringFlag{Name: "adapter-dir", Usage: "let POST /v1/adapters load LoRA adapters from `DIR`"},
				&cli.IntFlag{Name: "max-requests", Value: 256, Usage: "requests queued or running at once; more get 429"},
				&cli.IntFlag{Name: "max-body", Value: 1 << 20, Usage: "largest request body in bytes; larger get 413"},
				&cli.IntFlag{Name: "max-adapter-bytes", Value: 1 << 30, Usage: "largest adapter PUT /v1/adapters/NAME takes (with --adapter-dir); larger get 413"},
				&cli.IntFlag{Name: "max-n", Value: 64, Usage: "largest n (completions per request)"},
				&cli.DurationFlag{Name: "shutdown-timeout", Value: 5 * time.Minute, Usage: "on SIGTERM, how long in-flight requests may take to finish"},
				&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "no access log (one line per request on stderr)"},
			}),
			Action: serveCmd,
		}
	})
}

func serveCmd(ctx context.Context, c *cli.Command) error {
	cfg, m, err := openModel(c)
	if err != nil {
		return err
	}
	defer m.Close()
	o := server.Options{
		Config: cfg, ModelID: c.String("model-id"), AdapterDir: c.String("adapter-dir"),
		MaxRequests: c.Int("max-requests"), MaxBodyBytes: int64(c.Int("max-body")), MaxN: c.Int("max-n"),
		MaxAdapterBytes: int64(c.Int("max-adapter-bytes")), Log: os.Stderr, ShutdownTimeout: c.Duration("shutdown-timeout"),
	}
	if !c.Bool("quiet") {
		o.AccessLog = c.Root().ErrWriter
	}
	srv, err := server.New(m, o)
	if err != nil {
		return err
	}
	ln, err := server.Listen(ctx, net.JoinHostPort(c.String("host"), fmt.Sprint(c.Int("port"))))
	if err != nil {
		srv.Close()
		return err
	}
	fmt.Fprintf(c.Root().Writer, "serving %s on http://%s/v1\n", srv.ModelID(), ln.Addr())
	return srv.Serve(ctx, ln) // runMain cancels ctx on SIGINT or SIGTERM
}

// endpointFlags make rollout sample on an OpenAI-compatible server.
func endpointFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "endpoint", Usage: "sample on the OpenAI-compatible server at `URL` (e.g. http://127.0.0.1:8080/v1) instead of a local model"},
		&cli.StringFlag{Name: "endpoint-model", Usage: "model `NAME` the requests ask for (default: the first /v1/models lists)"},
		&cli.StringFlag{Name: "api-key", Sources: cli.EnvVars("OPENAI_API_KEY"), Usage: "bearer token for --endpoint"},
		&cli.IntFlag{Name: "concurrency", Value: 8, Usage: "requests in flight to --endpoint"},
		&cli.BoolFlag{Name: "endpoint-plain", Usage: "send only OpenAI's own request fields (for api.openai.com): no prompt_id, no token ids in the records"},
	}
}

// endpointOf is the rollout source the flags name, nil for the local model.
// The model's name is asked for now, so that the rollout file's provenance
// names it.
func endpointOf(ctx context.Context, c *cli.Command) (pipeline.RolloutSource, error) {
	if c.String("endpoint") == "" {
		return nil, nil
	}
	cl := &server.Client{Endpoint: c.String("endpoint"), ModelName: c.String("endpoint-model"), APIKey: c.String("api-key"), Concurrency: c.Int("concurrency"),
		Plain: c.Bool("endpoint-plain")}
	if err := cl.Resolve(ctx); err != nil {
		return nil, err
	}
	return cl, nil
}
