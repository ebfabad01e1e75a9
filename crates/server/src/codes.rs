//! Closed lists of codes: enums whose values are stored, displayed and
//! audited as fixed strings (the audit's own lists, the event kinds, the
//! refusal reasons of the domain modules). [`code_enum!`] defines one; every
//! such enum implements [`AuditCode`], which is what the audit's details take.
//!
//! Below `audit`, `events` and `db`, so that each of them can define its lists
//! without importing another.

/// Defines a closed list of codes: the enum, `ALL`, `as_str`, `parse`,
/// `Display` and [`AuditCode`]. Used for the audit's own lists and the event kinds.
macro_rules! code_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident => $text:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $name {
            /// Every value.
            pub const ALL: &'static [$name] = &[ $( Self::$variant, )+ ];

            /// The stored and displayed string.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( Self::$variant => $text, )+
                }
            }

            /// The value with exactly this string.
            pub fn parse(text: &str) -> Option<Self> {
                match text {
                    $( $text => Some(Self::$variant), )+
                    _ => None,
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl $crate::codes::AuditCode for $name {
            fn as_str(&self) -> &'static str {
                $name::as_str(*self)
            }
        }
    };
}
pub(crate) use code_enum;

/// A value from a closed list, written into the details as its string. Only
/// enums implement it: a `&'static str` is compiled in, but not every compiled-in
/// string is a code, and a `String` could carry anything.
pub trait AuditCode {
    /// The code's string.
    fn as_str(&self) -> &'static str;
}
