//! Errors across the gRPC hop.
//!
//! A backend error travels as a `tonic::Status` with the code from
//! [`ErrorCode::grpc_code`] and an [`ErrorDetail`] in binary metadata, so
//! the gateway restores the exact [`ErrorCode`] (gRPC codes alone conflate,
//! e.g., quota and rate limits). Statuses from elsewhere (transport
//! failures, proxies) fall back to [`ErrorCode::from_grpc_code`].

use mneme_core::{Error, ErrorCode};
use prost::Message;
use tonic::metadata::MetadataValue;

use crate::v1::ErrorDetail;

const ERROR_METADATA: &str = "x-mneme-error-bin";

/// Converts a domain error into the status a backend returns.
pub fn to_status(error: Error) -> tonic::Status {
    let detail = ErrorDetail {
        code: error.code.as_str().to_owned(),
        message: error.message.clone(),
    };
    let mut status = tonic::Status::new(tonic::Code::from(error.code.grpc_code()), error.message);
    status.metadata_mut().insert_bin(
        ERROR_METADATA,
        MetadataValue::from_bytes(&detail.encode_to_vec()),
    );
    status
}

/// Converts a status received by a client back into a domain error.
pub fn from_status(status: &tonic::Status) -> Error {
    let detail = status
        .metadata()
        .get_bin(ERROR_METADATA)
        .and_then(|value| value.to_bytes().ok())
        .and_then(|bytes| ErrorDetail::decode(bytes.as_ref()).ok());
    if let Some(detail) = detail
        && let Some(code) = ErrorCode::from_name(&detail.code)
    {
        return Error::new(code, detail.message);
    }
    let code = ErrorCode::from_grpc_code(status.code() as i32);
    let message = match code {
        ErrorCode::Timeout => "the backend did not answer in time",
        ErrorCode::Unavailable => "the backend is unavailable; retry shortly",
        ErrorCode::Unauthenticated => "the backend refused the call's credentials",
        _ => "internal error",
    };
    Error::new(code, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_code_survives_the_hop() {
        for code in ErrorCode::ALL {
            let original = Error::new(code, format!("about {code}"));
            let status = to_status(original.clone());
            assert_eq!(status.code() as i32, code.grpc_code());
            assert_eq!(from_status(&status), original);
        }
    }

    #[test]
    fn foreign_statuses_fall_back_by_grpc_code() {
        let status = tonic::Status::unavailable("connection refused (10.0.0.7:50051)");
        let error = from_status(&status);
        assert_eq!(error.code, ErrorCode::Unavailable);
        assert!(
            !error.message.contains("10.0.0.7"),
            "internal detail leaked"
        );
        assert_eq!(
            from_status(&tonic::Status::deadline_exceeded("late")).code,
            ErrorCode::Timeout
        );
    }
}
