//! The master world's generated bindings. This is the only place `bindgen!`
//! is called for `wit/master.wit`.

wasmtime::component::bindgen!({
    path: "../wit/master.wit",
    world: "master",
});
