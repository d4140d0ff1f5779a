package llama

/*
#include <stdlib.h>
#include "llama.h"
#include "ggml-backend.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unsafe"
)

// Device is a ggml backend device: a GPU, an accelerator or the CPU.
type Device struct {
	Name        string `json:"name"`        // "Vulkan0", "CUDA0", "CPU"
	Description string `json:"description"` // the driver's name for it
	Type        string `json:"type"`        // "gpu", "igpu" (integrated), "accel" or "cpu"
	Backend     string `json:"backend"`     // the backend that drives it: "Vulkan", "CUDA", "CPU"
	MemFree     uint64 `json:"mem_free"`    // bytes
	MemTotal    uint64 `json:"mem_total"`   // bytes
}

// IsGPU reports whether layers can be offloaded to the device.
func (d Device) IsGPU() bool { return d.Type == "gpu" || d.Type == "igpu" }

var devTypes = map[C.enum_ggml_backend_dev_type]string{
	C.GGML_BACKEND_DEVICE_TYPE_CPU: "cpu", C.GGML_BACKEND_DEVICE_TYPE_GPU: "gpu",
	C.GGML_BACKEND_DEVICE_TYPE_IGPU: "igpu", C.GGML_BACKEND_DEVICE_TYPE_ACCEL: "accel",
}

// Devices lists every device the compiled backends found, in ggml's order
// (GPUs first, the CPU last).
func Devices() []Device {
	Init()
	var out []Device
	for i := 0; i < int(C.ggml_backend_dev_count()); i++ {
		out = append(out, device(C.ggml_backend_dev_get(C.size_t(i))))
	}
	return out
}

func device(dev C.ggml_backend_dev_t) Device {
	var free, total C.size_t
	C.ggml_backend_dev_memory(dev, &free, &total)
	return Device{
		Name:        C.GoString(C.ggml_backend_dev_name(dev)),
		Description: C.GoString(C.ggml_backend_dev_description(dev)),
		Type:        devTypes[C.ggml_backend_dev_type(dev)],
		Backend:     C.GoString(C.ggml_backend_reg_name(C.ggml_backend_dev_backend_reg(dev))),
		MemFree:     uint64(free),
		MemTotal:    uint64(total),
	}
}

// BackendNames lists the compiled backends ("Vulkan", "CPU"), including
// those that found no device.
func BackendNames() []string {
	Init()
	var out []string
	for i := 0; i < int(C.ggml_backend_reg_count()); i++ {
		out = append(out, C.GoString(C.ggml_backend_reg_name(C.ggml_backend_reg_get(C.size_t(i)))))
	}
	return out
}

// ErrNoGPU is wrapped by the error of a load that asks for GPU layers where
// there is no GPU device.
var ErrNoGPU = errors.New("no GPU device")

// noGPUError says why no GPU is there: the build has no GPU backend, or its
// backend found no device.
func noGPUError(layers int) error {
	asked := fmt.Sprintf("%d GPU layers asked (gpu_layers, -ngl)", layers)
	if layers < 0 {
		asked = "all layers asked on the GPU (gpu_layers = -1)"
	}
	var gpuBackends []string
	for _, b := range BackendNames() {
		if b != "CPU" && b != "BLAS" {
			gpuBackends = append(gpuBackends, b)
		}
	}
	if len(gpuBackends) == 0 {
		return fmt.Errorf("%s, but this build has no GPU backend (only %s): build one with `make GGML_VULKAN=ON` or `make GGML_CUDA=ON` (docs/gpu.md), or set gpu_layers = 0: %w",
			asked, strings.Join(BackendNames(), ", "), ErrNoGPU)
	}
	hint := ""
	if slices.Contains(gpuBackends, "Vulkan") {
		hint = " (a software Vulkan device such as lavapipe is used only with GGML_VK_VISIBLE_DEVICES=0)"
	}
	return fmt.Errorf("%s, but the %s backend found no device%s; set gpu_layers = 0 to run on the CPU: %w",
		asked, strings.Join(gpuBackends, " and "), hint, ErrNoGPU)
}

// selectDevices returns the device list for llama_model_params.devices: a
// NULL-terminated C array the caller frees, or nil for llama.cpp's own
// choice (every GPU). No GPU layers and no op offload gives an empty list,
// so that nothing runs on a device: without it llama.cpp would still keep
// weights in the first GPU's host buffers and send large matrix products to
// it (op offload).
// It also returns the GPU devices the layers may go to.
func selectDevices(p ModelParams) (*C.ggml_backend_dev_t, []Device, error) {
	Init()
	cpuOnly := strings.EqualFold(p.Device, "cpu")
	if cpuOnly && p.GPULayers != 0 {
		return nil, nil, fmt.Errorf("device CPU with gpu_layers = %d: set gpu_layers = 0 or name a GPU device (`confclip version` lists them)", p.GPULayers)
	}
	var gpus []Device
	var names []string
	var named C.ggml_backend_dev_t
	var namedDev Device
	for i := 0; i < int(C.ggml_backend_dev_count()); i++ {
		dev := C.ggml_backend_dev_get(C.size_t(i))
		if d := device(dev); d.IsGPU() {
			gpus = append(gpus, d)
			names = append(names, d.Name)
			if p.Device != "" && strings.EqualFold(p.Device, d.Name) {
				named, namedDev = dev, d
			}
		}
	}
	// A device name that is not there is an error whatever the layers: a
	// typo must not fall back to the CPU silently.
	if p.Device != "" && !cpuOnly && named == nil {
		return nil, nil, fmt.Errorf("no device %q: this build has %s", p.Device, strings.Join(append(names, "CPU"), ", "))
	}
	if cpuOnly || (p.GPULayers == 0 && !p.OpOffload) {
		return devList(nil), nil, nil
	}
	if named != nil {
		return devList([]C.ggml_backend_dev_t{named}), []Device{namedDev}, nil
	}
	if len(gpus) == 0 {
		return nil, nil, noGPUError(p.GPULayers)
	}
	return nil, gpus, nil
}

// Devices lists the GPU devices the model's layers may be on (none: it runs
// on the CPU only).
func (m *Model) Devices() []Device { return m.devices }

func devList(devs []C.ggml_backend_dev_t) *C.ggml_backend_dev_t {
	var d C.ggml_backend_dev_t
	arr := (*C.ggml_backend_dev_t)(C.calloc(C.size_t(len(devs)+1), C.size_t(unsafe.Sizeof(d)))) // zeroed: the stores below find no garbage
	s := unsafe.Slice(arr, len(devs)+1)
	copy(s, devs)
	s[len(devs)] = nil
	return arr
}
