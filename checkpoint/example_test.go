package checkpoint_test

import (
	"encoding/binary"
	"fmt"
	"log"
	"math"
	"os"
	"path/filepath"

	"github.com/gotrain/gotrain/checkpoint"
)

func Example() {
	dir, err := os.MkdirTemp("", "example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// A model state_dict (an OrderedDict, as Python's load_state_dict expects) with one
	// 2x2 float32 weight, inside a training checkpoint.
	data := make([]byte, 0, 16)
	for _, v := range []float32{1, 2, 3, 4} {
		data = binary.LittleEndian.AppendUint32(data, math.Float32bits(v))
	}
	model := checkpoint.NewOrderedDict()
	model.Set("fc.weight", checkpoint.NewTensor(checkpoint.Float32, []int64{2, 2}, data))
	ck := checkpoint.NewDict()
	ck.Set("epoch", 3)
	ck.Set("best_metric", 0.8125)
	ck.Set("model_state_dict", model)

	// Python: torch.load("ckpt.pt") (weights_only=True) returns the same dict.
	path := filepath.Join(dir, "ckpt.pt")
	if err := checkpoint.Write(path, ck); err != nil {
		log.Fatal(err)
	}

	back, err := checkpoint.Read(path)
	if err != nil {
		log.Fatal(err)
	}
	epoch, _ := checkpoint.GetInt(back, "epoch")
	w, _ := checkpoint.GetTensor(back, "model_state_dict", "fc.weight")
	_, err = checkpoint.GetTensor(back, "model_state_dict", "fc.bias")
	fmt.Println(epoch, w.DType, w.Shape, w.Float64s())
	fmt.Println(err)
	// Output:
	// 3 float32 [2 2] [1 2 3 4]
	// checkpoint: model_state_dict: key "fc.bias" not found
}
