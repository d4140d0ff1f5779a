package main

import (
	"github.com/urfave/cli/v3"

	"github.com/confclip/confclip/pipeline"
)

// dataFlags are [data]: how a prompt file of another shape is read.
func dataFlags() []cli.Flag {
	return []cli.Flag{
		stringOpt("map", nil, "prompt fields of a file of no known shape, `FIELD=SOURCE,...`: prompt=question,answer=solution (answer=solution:boxed or :gsm8k cuts the answer out) ([data] map)",
			func(c *pipeline.Config) *string { return &c.Data.Map }),
	}
}
