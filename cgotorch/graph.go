package cgotorch

/*
#include "cgotorch.h"
*/
import "C"

import "unsafe"

// Graph is a CUDA graph (cg_graph): C memory, freed with GraphFree.
type Graph = unsafe.Pointer

// GraphNew returns an empty graph on CUDA device device.
func GraphNew(device int) (Graph, error) {
	var g C.cg_graph
	err := st(C.cg_graph_new(C.int(device), &g))
	return Graph(g), err
}

// GraphBegin moves the calling thread to a side stream, capturing into g when capture is
// set (cg_graph_begin).
func GraphBegin(g Graph, capture bool) error {
	c := 0
	if capture {
		c = 1
	}
	return st(C.cg_graph_begin(C.cg_graph(g), C.int(c)))
}

// GraphEnd ends GraphBegin's warm-up or capture (cg_graph_end).
func GraphEnd(g Graph) error { return st(C.cg_graph_end(C.cg_graph(g))) }

// GraphReplay launches g's work on the current stream.
func GraphReplay(g Graph) error { return st(C.cg_graph_replay(C.cg_graph(g))) }

// GraphFree frees g and its memory pool.
func GraphFree(g Graph) { C.cg_graph_free(C.cg_graph(g)) }
