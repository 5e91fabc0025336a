package serve_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/serve"
)

// mount is docs/serving.md's example: the API under /llm/ of a service's own mux.
func mount(mux *http.ServeMux, dir, key string) (stop func(), err error) {
	e, err := serve.NewEngine(serve.Config{Model: dir, MaxBatch: 16})
	if err != nil {
		return nil, err
	}
	mux.Handle("/llm/", http.StripPrefix("/llm", serve.NewHandler(e, serve.HandlerOptions{APIKey: key})))
	return e.Close, nil
}

func TestMount(t *testing.T) {
	mux := http.NewServeMux()
	stop, err := mount(mux, serve.FixtureModel(t), "k")
	require.NoError(t, err)
	defer stop()
	srv := httptest.NewServer(mux)
	defer srv.Close()
	req, _ := http.NewRequest("GET", srv.URL+"/llm/v1/models", nil)
	req.Header.Set("Authorization", "Bearer k")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var list struct {
		Data []struct{ ID string } `json:"data"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&list))
	require.Len(t, list.Data, 1)
	assert.Equal(t, "base", list.Data[0].ID)
}
