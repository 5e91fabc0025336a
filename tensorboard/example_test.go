package tensorboard_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/gotrain/gotrain/tensorboard"
)

func Example() {
	logdir, err := os.MkdirTemp("", "runs")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(logdir)

	w, err := tensorboard.NewWriter(filepath.Join(logdir, "exp1"))
	if err != nil {
		log.Fatal(err)
	}
	if err := w.AddText("config", "    lr: 0.001\n    epochs: 2", 0); err != nil {
		log.Fatal(err)
	}
	for epoch := int64(1); epoch <= 2; epoch++ {
		if err := w.AddScalars(epoch, map[string]float64{
			"loss/train": 1.0 / float64(epoch),
			"loss/val":   1.5 / float64(epoch),
		}); err != nil {
			log.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		log.Fatal(err)
	}

	// Read the file back, as tensorboard --logdir would.
	f, err := os.Open(w.Path())
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	events, err := tensorboard.ReadEvents(f)
	if err != nil {
		log.Fatal(err)
	}
	for _, ev := range events {
		if ev.FileVersion != "" {
			fmt.Println(ev.FileVersion)
		}
		for _, v := range ev.Values {
			switch v.Kind {
			case tensorboard.ScalarValue:
				fmt.Printf("step %d %s = %g\n", ev.Step, v.Tag, v.Scalar)
			case tensorboard.TextValue:
				fmt.Printf("step %d %s:\n%s\n", ev.Step, v.Tag, v.Text)
			}
		}
	}
	// Output:
	// brain.Event:2
	// step 0 config:
	//     lr: 0.001
	//     epochs: 2
	// step 1 loss/train = 1
	// step 1 loss/val = 1.5
	// step 2 loss/train = 0.5
	// step 2 loss/val = 0.75
}
