//! The `#[job]` attribute of `cohort-guest`. Use it through
//! `cohort_guest::job`; this crate is an implementation detail.
//!
//! The attribute keeps the function as written and adds the component export
//! glue next to it: a unit type implementing the generated `Guest` trait,
//! whose `run` converts the input bytes with `FromInput`, calls the function
//! and converts its output with `IntoOutput`. All conversion logic lives in
//! `cohort-guest` itself, so this macro only has to find the function's name.

use proc_macro::TokenStream;
use quote::quote;
use syn::{ItemFn, ReturnType, parse_macro_input, spanned::Spanned};

/// Marks the one function that is this component's job.
///
/// The function takes one argument whose type implements
/// `cohort_guest::FromInput` and returns `Result<O, E>` where `O` implements
/// `cohort_guest::IntoOutput` and `E: Into<cohort_guest::JobError>`.
#[proc_macro_attribute]
pub fn job(attr: TokenStream, item: TokenStream) -> TokenStream {
    if !attr.is_empty() {
        let attr = proc_macro2::TokenStream::from(attr);
        return syn::Error::new(attr.span(), "#[job] takes no arguments")
            .to_compile_error()
            .into();
    }
    let function = parse_macro_input!(item as ItemFn);
    if let Err(error) = check_signature(&function) {
        return error.to_compile_error().into();
    }
    let name = &function.sig.ident;
    quote! {
        #function

        #[doc(hidden)]
        struct __CohortJob;

        impl ::cohort_guest::__private::Guest for __CohortJob {
            fn run(
                input: ::std::vec::Vec<u8>,
            ) -> ::std::result::Result<::std::vec::Vec<u8>, ::cohort_guest::__private::WitJobError> {
                ::cohort_guest::__private::run_job(input, #name)
            }
        }

        ::cohort_guest::bindings::__export_job!(__CohortJob);
    }
    .into()
}

fn check_signature(function: &ItemFn) -> syn::Result<()> {
    let sig = &function.sig;
    if sig.inputs.len() != 1 {
        return Err(syn::Error::new(
            sig.inputs.span(),
            "a cohort job takes exactly one argument: its input",
        ));
    }
    if let Some(receiver) = sig.receiver() {
        return Err(syn::Error::new(
            receiver.span(),
            "a cohort job is a free function, not a method",
        ));
    }
    if sig.asyncness.is_some() || !sig.generics.params.is_empty() {
        return Err(syn::Error::new(
            sig.span(),
            "a cohort job is a plain, non-generic, synchronous function",
        ));
    }
    if matches!(sig.output, ReturnType::Default) {
        return Err(syn::Error::new(
            sig.span(),
            "a cohort job returns Result<Output, Error>",
        ));
    }
    Ok(())
}
