//! Every failure as `{"error": "..."}` with its status code.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::api::ErrorBody;

/// An error answer.
#[derive(Debug)]
pub struct ApiError {
    /// Its status.
    pub status: StatusCode,
    /// Its text.
    pub message: String,
}

impl ApiError {
    /// An error with `status` and `message`.
    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
        }
    }

    /// 400: the request is well-formed JSON but not valid.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    /// 401.
    pub fn unauthorized(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, message)
    }
}

impl From<convlog::Error> for ApiError {
    fn from(error: convlog::Error) -> ApiError {
        use convlog::Error;
        let status = match &error {
            Error::ContextNotFound { .. }
            | Error::ConversationNotFound { .. }
            | Error::EvaluationNotFound { .. } => StatusCode::NOT_FOUND,
            Error::ProviderUnsupported { .. } | Error::ProviderMalformed { .. } => {
                StatusCode::CONFLICT
            }
            Error::NotContextOwner { .. } => StatusCode::FORBIDDEN,
            Error::ContextExists { .. } | Error::Conflict { .. } => StatusCode::CONFLICT,
            Error::ResponsesWithoutCalls { .. }
            | Error::ResponseBeforeCall { .. }
            | Error::CallsWithoutResponses { .. }
            | Error::DuplicateOpenCallIds { .. }
            | Error::DuplicateCallId { .. }
            | Error::AnonymousPrivateContext { .. }
            | Error::InvalidEvent { .. }
            | Error::InvalidLine { .. }
            | Error::InvalidCuration { .. }
            | Error::EmptyBatch => StatusCode::BAD_REQUEST,
            Error::LimitExceeded { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Error::GenerationFailed { .. } => StatusCode::BAD_GATEWAY,
            // Its key was destroyed on purpose: gone for good.
            Error::Erased { .. } => StatusCode::GONE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        if status == StatusCode::INTERNAL_SERVER_ERROR {
            tracing::error!(%error, "store error");
        }
        ApiError::new(status, error.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (
            self.status,
            Json(ErrorBody {
                error: self.message,
            }),
        )
            .into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}
