package dev.lakesession.jvm;

import com.amazonaws.AmazonClientException;
import com.amazonaws.AmazonServiceException;
import com.amazonaws.AmazonWebServiceRequest;
import com.amazonaws.auth.AWSCredentials;
import com.amazonaws.auth.AWSCredentialsProvider;
import com.amazonaws.handlers.RequestHandler2;
import com.amazonaws.services.s3.model.AbortMultipartUploadRequest;
import com.amazonaws.services.s3.model.AmazonS3Exception;
import com.amazonaws.services.s3.model.CompleteMultipartUploadRequest;
import com.amazonaws.services.s3.model.CopyObjectRequest;
import com.amazonaws.services.s3.model.CopyPartRequest;
import com.amazonaws.services.s3.model.DeleteObjectRequest;
import com.amazonaws.services.s3.model.DeleteObjectsRequest;
import com.amazonaws.services.s3.model.InitiateMultipartUploadRequest;
import com.amazonaws.services.s3.model.PutObjectRequest;
import com.amazonaws.services.s3.model.UploadPartRequest;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.List;
import org.apache.hadoop.conf.Configuration;

/**
 * S3A's request check on AWS SDK v1 (Hadoop 3.3, Spark 3.5): the SDK calls {@code beforeExecution} as each
 * S3 call begins, before it signs or sends anything. Every request's bucket/key is checked against the
 * bucket's union of this session's prefixes ({@link GrantCheck#union}): a refusal fails the request with the
 * catalog's words as an S3 403 (S3A raises AccessDeniedException; no request reaches the store), and a
 * request naming an object is signed with the key of its prefix (the request's own credentials provider,
 * which the SDK prefers to the client's). Added by {@link GatewayS3ClientFactoryV1}, which hands it the
 * filesystem's Configuration (S3A 3.3 builds {@code fs.s3a.audit.request.handlers} without one).
 */
public final class GrantCheckHandlerV1 extends RequestHandler2 {
  private final Configuration conf;

  GrantCheckHandlerV1(Configuration conf) {
    this.conf = conf;
  }

  static boolean isWrite(AmazonWebServiceRequest r) {
    return r instanceof PutObjectRequest
        || r instanceof DeleteObjectRequest
        || r instanceof DeleteObjectsRequest
        || r instanceof InitiateMultipartUploadRequest
        || r instanceof UploadPartRequest
        || r instanceof CopyPartRequest
        || r instanceof CompleteMultipartUploadRequest
        || r instanceof AbortMultipartUploadRequest
        || r instanceof CopyObjectRequest;
  }

  @Override
  public AmazonWebServiceRequest beforeExecution(AmazonWebServiceRequest request) {
    if (!GrantCheck.wired(conf)) {
      return request;
    }
    boolean write = isWrite(request);
    String bucket;
    List<String> keys = new ArrayList<>();
    if (request instanceof CopyObjectRequest) {
      CopyObjectRequest copy = (CopyObjectRequest) request;
      check(copy.getSourceBucketName(), List.of(copy.getSourceKey()), "read");
      bucket = copy.getDestinationBucketName();
      keys.add(copy.getDestinationKey());
    } else if (request instanceof CopyPartRequest) {
      CopyPartRequest copy = (CopyPartRequest) request;
      check(copy.getSourceBucketName(), List.of(copy.getSourceKey()), "read");
      bucket = copy.getDestinationBucketName();
      keys.add(copy.getDestinationKey());
    } else if (request instanceof DeleteObjectsRequest) {
      DeleteObjectsRequest delete = (DeleteObjectsRequest) request;
      bucket = delete.getBucketName();
      for (DeleteObjectsRequest.KeyVersion k : delete.getKeys()) {
        keys.add(k.getKey());
      }
    } else {
      bucket = getter(request, "getBucketName");
      String key = getter(request, "getKey");
      if (key == null) {
        key = getter(request, "getPrefix");
      }
      if (key != null) {
        keys.add(key);
      }
    }
    if (bucket == null) {
      return request;
    }
    BucketCredentials union = check(bucket, keys, write ? "write" : "read");
    String signFor = keys.isEmpty() || keys.get(0) == null ? null : "s3://" + bucket + "/" + keys.get(0);
    if (write || signFor != null) {
      request.setRequestCredentialsProvider(new Signer(union, signFor));
    }
    return request;
  }

  /** The key covering one path, resolved when the SDK signs (a refreshed answer is picked up). */
  private static final class Signer implements AWSCredentialsProvider {
    private final BucketCredentials union;
    private final String path;

    Signer(BucketCredentials union, String path) {
      this.union = union;
      this.path = path;
    }

    @Override
    public AWSCredentials getCredentials() {
      try {
        return S3ACredentialsProviderV1.toSdk(GrantCheck.keyFor(union, path));
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
    }

    @Override
    public void refresh() {}
  }

  private static String getter(AmazonWebServiceRequest r, String name) {
    try {
      Object v = r.getClass().getMethod(name).invoke(r);
      return v instanceof String ? (String) v : null;
    } catch (ReflectiveOperationException | RuntimeException e) {
      return null;
    }
  }

  private BucketCredentials check(String bucket, List<String> keys, String mode) {
    try {
      return GrantCheck.union(conf, bucket, keys, mode);
    } catch (GatewayClient.GatewayException e) {
      AmazonS3Exception refused = new AmazonS3Exception(e.getMessage());
      refused.setStatusCode(GrantCheck.status(e));
      refused.setErrorCode("AccessDenied");
      refused.setErrorType(AmazonServiceException.ErrorType.Client);
      refused.setServiceName("Amazon S3");
      throw refused;
    } catch (IOException e) {
      throw new AmazonClientException("lakesession: " + e.getMessage(), e);
    }
  }
}
