package main

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/pipeline"
)

// dataFlags are [data]: how a prompt file of another shape is read.
func dataFlags() []cli.Flag {
	return []cli.Flag{
		stringOpt("map", nil, "prompt fields of a file of no known shape, `FIELD=SOURCE,...`: prompt=question,answer=solution (answer=solution:boxed or :gsm8k cuts the answer out) ([data] map)",
			func(c *pipeline.Config) *string { return &c.Data.Map }),
	}
}

// exportFormat splits export's --format into the file format and the
// column layout: "parquet", "trl", "verl,parquet" ... (an empty part is
// left to the default: the file format from --out's extension, the
// confclip layout).
func exportFormat(s string) (format, layout string, err error) {
	for _, part := range strings.Split(s, ",") {
		switch part = strings.TrimSpace(part); part {
		case "":
		case dataset.FormatJSONL, dataset.FormatParquet:
			format = part
		case dataset.LayoutConfclip, dataset.LayoutTRL, dataset.LayoutVerl:
			layout = part
		default:
			return "", "", fmt.Errorf("--format %q: want jsonl or parquet, and/or confclip, trl or verl (e.g. verl,parquet)", s)
		}
	}
	return format, layout, nil
}
